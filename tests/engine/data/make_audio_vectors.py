#!/usr/bin/python3
"""Writes audio clips and what the Clef reference's PyAV decode makes of them, for the resampling
tests: OUTDIR/<name> (the clip) and OUTDIR/<name>.f32 (16 kHz mono float32, little-endian), for
every rate in RATES, mono and stereo, as MP3, AAC (in .m4a) and WAV, the EXTRAS, and
OUTDIR/video_44100_stereo.mp4 (MPEG-4 video with a 44.1 kHz stereo AAC soundtrack). Everything is
synthesised (fixed seed); nothing is read from the network.

For the audio feature tests, the processor's log-mel features of several audio streams of different
lengths in one call (see batch_log_mel): OUTDIR/batch_synthetic.<i>.f32 (three synthesised 16 kHz
streams) and, for the media of tests/data/vectors/clef-omni-tiny (a 2.5 s clip and the 2.048 s
soundtrack of a 2 s video, the reference's decode of each), OUTDIR/batch_clip_and_soundtrack; each
stream's OUTDIR/batch_<case>.<i>.mel (float32 [128, frames], row-major) and .mask (int32 [frames]).

The decode is the reference's (Clef-Omni's load_audio_from_video): every frame through one
av.AudioResampler(format="flt", layout="mono", rate=16000), flushed with resample(None), the
frames' samples concatenated as float32.

Usage: make_audio_vectors.py OUTDIR
"""
import sys
from pathlib import Path

import av
import numpy as np

RATES = [8000, 16000, 22050, 44100, 48000]
LAYOUTS = {"mono": 1, "stereo": 2}
CHANNELS = dict(LAYOUTS, **{"5.1": 6})
# container extension -> (encoder, its sample format)
CODECS = {"mp3": ("libmp3lame", "fltp"), "m4a": ("aac", "fltp"), "wav": ("pcm_s16le", "s16")}
EXTRAS = [("passthrough_16000_mono.wav", 16000, "mono", "pcm_f32le", "flt"),
          ("tone_48000_5.1.m4a", 48000, "5.1", "aac", "fltp")]
SECONDS = 1.37  # not a whole number of any codec's frames


def signal(rate, channels):
    """Channels that differ (so the down-mix shows), a sweep to just under the input's Nyquist
    frequency (so the resampler's low-pass shows) and a little noise."""
    rng = np.random.default_rng(rate * 10 + channels)
    t = np.arange(int(SECONDS * rate)) / rate
    top = 0.45 * rate
    sweep = np.sin(2 * np.pi * (100 * t + (top - 100) * t * t / (2 * SECONDS)))
    tones = [(0.3, 440), (0.35, 1234.5), (0.2, 660), (0.15, 97), (0.25, 2500), (0.1, 3100)]
    return np.stack([a * np.sin(2 * np.pi * f * t + k) + (0.25 if k % 2 == 0 else -0.2) * sweep
                     + 0.02 * rng.standard_normal(t.size)
                     for k, (a, f) in enumerate(tones[:channels])]).astype(np.float32)


def frames_of(samples, rate, layout, sample_format, frame_size):
    """The encoder's input frames: planar float, or packed (interleaved) float or int16."""
    for start in range(0, samples.shape[1], frame_size):
        chunk = samples[:, start:start + frame_size]
        if sample_format == "s16":
            chunk = np.clip(np.round(chunk * 32767), -32768, 32767).astype(np.int16)
        if not sample_format.endswith("p"):
            chunk = chunk.T.reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(chunk), format=sample_format, layout=layout)
        frame.sample_rate = rate
        frame.pts = start
        yield frame


def encode_audio(container, codec, sample_format, rate, layout):
    stream = container.add_stream(codec, rate=rate)
    stream.layout = layout
    stream.format = sample_format
    return stream


def write_audio(path, rate, layout, codec, sample_format):
    samples = signal(rate, CHANNELS[layout])
    with av.open(str(path), "w") as out:
        stream = encode_audio(out, codec, sample_format, rate, layout)
        stream.codec_context.open()
        frame_size = stream.codec_context.frame_size or 1000
        for frame in frames_of(samples, rate, layout, sample_format, frame_size):
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))


def write_video(path, rate, layout):
    """3 s of 64 x 48 MPEG-4 at 5 fps with the AAC soundtrack of write_audio."""
    samples = signal(rate, CHANNELS[layout])
    with av.open(str(path), "w") as out:
        picture = out.add_stream("mpeg4", rate=5)
        picture.width, picture.height, picture.pix_fmt = 64, 48, "yuv420p"
        sound = encode_audio(out, "aac", "fltp", rate, layout)
        sound.codec_context.open()
        for i in range(int(SECONDS * 5)):
            grey = np.full((48, 64, 3), 40 + 20 * i, np.uint8)
            out.mux(picture.encode(av.VideoFrame.from_ndarray(grey, format="rgb24")))
        out.mux(picture.encode(None))
        for frame in frames_of(samples, rate, layout, "fltp", sound.codec_context.frame_size):
            out.mux(sound.encode(frame))
        out.mux(sound.encode(None))


def reference_decode(path):
    """The reference's decode, as Clef-Omni writes it."""
    with av.open(str(path)) as container:
        stream = next(s for s in container.streams if s.type == "audio")
        resampler = av.AudioResampler(format="flt", layout="mono", rate=16000)
        chunks = []
        for frame in container.decode(stream):
            for resampled in resampler.resample(frame):
                chunks.append(resampled.to_ndarray().reshape(-1))
        for resampled in resampler.resample(None):
            chunks.append(resampled.to_ndarray().reshape(-1))
    return np.concatenate(chunks).astype(np.float32)


# The Qwen3-Omni processor's WhisperFeatureExtractor (feature_size 128, n_fft 400, hop 160).
N_FFT, HOP, MEL_BINS, FEATURE_RATE = 400, 160, 128, 16000


def hertz_to_mel(hertz):
    """The Slaney mel scale of transformers' audio_utils."""
    hertz = np.asarray(hertz, np.float64)
    mels = 3.0 * hertz / 200.0
    log = hertz >= 1000.0
    mels[log] = 15.0 + np.log(hertz[log] / 1000.0) * (27.0 / np.log(6.4))
    return mels


def mel_to_hertz(mels):
    mels = np.asarray(mels, np.float64)
    hertz = 200.0 * mels / 3.0
    log = mels >= 15.0
    hertz[log] = 1000.0 * np.exp(np.log(6.4) / 27.0 * (mels[log] - 15.0))
    return hertz


def mel_filter_bank():
    """transformers' mel_filter_bank(201, 128, 0, 8000, 16000, "slaney", "slaney"): [201, 128]."""
    fft_freqs = np.linspace(0, FEATURE_RATE // 2, N_FFT // 2 + 1)
    filter_freqs = mel_to_hertz(np.linspace(hertz_to_mel([0.0])[0], hertz_to_mel([8000.0])[0], MEL_BINS + 2))
    slopes = filter_freqs[None, :] - fft_freqs[:, None]
    diff = np.diff(filter_freqs)
    bank = np.maximum(0.0, np.minimum(-slopes[:, :-2] / diff[:-1], slopes[:, 2:] / diff[1:]))
    return bank * (2.0 / (filter_freqs[2:] - filter_freqs[:-2]))[None, :]


def log_mel(waveform):
    """WhisperFeatureExtractor._np_extract_fbank_features of one (padded) waveform: audio_utils'
    spectrogram (centred, reflect-padded, periodic Hann, float64 rfft, power 2, mel, log10 of at
    least 1e-10, cast to float32), the last frame dropped, clamped to its own max - 8, (x + 4) / 4."""
    padded = np.pad(waveform.astype(np.float64), N_FFT // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP]
    window = np.hanning(N_FFT + 1)[:-1]
    power = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2
    spec = np.log10(np.maximum(1e-10, mel_filter_bank().T @ power.T)).astype(np.float32)[:, :-1]
    spec = np.maximum(spec, spec.max() - 8.0)
    return ((spec + 4.0) / 4.0).astype(np.float32)


def batch_log_mel(streams):
    """What the Qwen3-Omni processor (transformers v4.57.6 processing_qwen3_omni_moe.py) makes of
    one record's audio: a single WhisperFeatureExtractor call on every stream (the record's audio
    items, then its videos' soundtracks when every video has one), with padding=True (the longest)
    and return_attention_mask. SequenceFeatureExtractor.pad puts zeros after every shorter stream up
    to the longest *before* the spectrogram, so a shorter stream's last frames see those zeros (and
    the reflect padding is at the padded end), and each stream is clamped to the max over its padded
    frames. The attention mask is the padded sample mask taken every 160 samples (ceil(n / 160)
    ones), less its last entry when the longest is not a multiple of 160: [frames]. The model keeps
    the frames the mask marks."""
    longest = max(s.size for s in streams)
    frames = longest // HOP
    out = []
    for s in streams:
        features = log_mel(np.pad(s.astype(np.float32), (0, longest - s.size)))
        assert features.shape == (MEL_BINS, frames)
        mask = (np.arange(frames) * HOP < s.size).astype(np.int32)
        out.append((features, mask))
    return out


def write_batch(out, case, streams):
    for i, (features, mask) in enumerate(batch_log_mel(streams)):
        np.ascontiguousarray(features).astype("<f4").tofile(str(out / f"batch_{case}.{i}.mel"))
        mask.astype("<i4").tofile(str(out / f"batch_{case}.{i}.mask"))


def synthetic_stream(samples, seed):
    """16 kHz tones, a sweep and noise, loud to the last sample (so the end's padding shows)."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / FEATURE_RATE
    wave = (0.3 * np.sin(2 * np.pi * (300 + 150 * seed) * t) + 0.2 * np.sin(2 * np.pi * (1700 + 40 * seed) * t)
            + 0.2 * np.sin(2 * np.pi * (200 * t + 1500 * t * t)) + 0.05 * rng.standard_normal(samples))
    return wave.astype(np.float32)


def main():
    out = Path(sys.argv[1])
    av.logging.set_level(av.logging.ERROR)  # the encoders' notes on clamped bit rates
    out.mkdir(parents=True, exist_ok=True)
    clips = []
    for rate in RATES:
        for layout in LAYOUTS:
            for ext, (codec, sample_format) in CODECS.items():
                path = out / f"tone_{rate}_{layout}.{ext}"
                write_audio(path, rate, layout, codec, sample_format)
                clips.append(path)
    # Float mono at 16 kHz, which PyAV passes through untouched; and 5.1 (the default down-mix's
    # centre and surround levels).
    for name, rate, layout, codec, sample_format in EXTRAS:
        write_audio(out / name, rate, layout, codec, sample_format)
        clips.append(out / name)
    video = out / "video_44100_stereo.mp4"
    write_video(video, 44100, "stereo")
    clips.append(video)
    for path in clips:
        reference_decode(path).astype("<f4").tofile(str(path) + ".f32")

    # Streams of different lengths in one processor call: the longest not a multiple of 160 (its
    # mask loses the entry past the last frame); 32768 samples as the clip's soundtrack below; 16020
    # (20 past a multiple of 160), whose last frame alone would reach 20 reflected samples.
    streams = [synthetic_stream(n, k) for k, n in enumerate([36123, 32768, 16020])]
    for i, s in enumerate(streams):
        s.astype("<f4").tofile(str(out / f"batch_synthetic.{i}.f32"))
    write_batch(out, "synthetic", streams)
    # The clef-omni-tiny media: the clip, then the video's soundtrack, as the reference orders them.
    media = Path(__file__).resolve().parents[2] / "data" / "vectors" / "clef-omni-tiny" / "media"
    write_batch(out, "clip_and_soundtrack",
                [reference_decode(media / "tone_16k_mono_2p5s.wav"), reference_decode(media / "clip_sound_2s.mp4")])


if __name__ == "__main__":
    main()

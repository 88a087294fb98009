#!/usr/bin/python3
"""Writes audio clips and what the Clef reference's PyAV decode makes of them, for the resampling
tests: OUTDIR/<name> (the clip) and OUTDIR/<name>.f32 (16 kHz mono float32, little-endian), for
every rate in RATES, mono and stereo, as MP3, AAC (in .m4a) and WAV, the EXTRAS, and
OUTDIR/video_44100_stereo.mp4 (MPEG-4 video with a 44.1 kHz stereo AAC soundtrack). Everything is
synthesised (fixed seed); nothing is read from the network.

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


if __name__ == "__main__":
    main()

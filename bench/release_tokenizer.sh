#!/bin/bash
# Gives a random release (bench/clef_forward.cpp, bench/tile_layers.py) the Qwen3-Omni tokenizer of
# the tests' data and that tokenizer's media token ids (random releases carry no tokenizer and put
# them at 31990-31996), so that requests are read as the real model reads them. Run from the
# repository root.
#
#   bench/release_tokenizer.sh RELEASE
set -euo pipefail
release=${1:?usage: bench/release_tokenizer.sh RELEASE}
cp tests/data/vectors/tokenizer/qwen3_omni_tokenizer.json "$release/tokenizer.json"
python3 - "$release/config.json" <<'PY'
import json, sys
path = sys.argv[1]
config = json.load(open(path))
ids = {"image_token_id": 151655, "video_token_id": 151656, "audio_token_id": 151675, "vision_start_token_id": 151652,
       "vision_end_token_id": 151653, "audio_start_token_id": 151669, "audio_end_token_id": 151670}
config["thinker_config"].update(ids)
json.dump(config, open(path, "w"), indent=1)
PY

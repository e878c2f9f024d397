#!/usr/bin/env bash
# Regenerates src/auditmem/models.py from docs/openapi.json with datamodel-code-generator (the
# version tests/python/requirements.txt pins). `generate.sh DIR` writes the file into DIR
# instead: the drift test (tests/test_models.py) compares that with the checked-in one.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/src/auditmem}"
python="${PYTHON:-python3}"
"$python" -m datamodel_code_generator \
  --input "$here/../../docs/openapi.json" \
  --input-file-type openapi \
  --output "$out/models.py" \
  --output-model-type pydantic_v2.BaseModel \
  --target-python-version 3.11 \
  --formatters black isort \
  --disable-timestamp \
  --custom-file-header '# Generated from docs/openapi.json by clients/python/generate.sh: do not edit.'

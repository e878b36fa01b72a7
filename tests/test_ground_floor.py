"""The ground floor's torch-free part: configs, errors and component tables import without torch.

`align --help`, `align validate` and `align ls` read these modules; keeping torch (seconds to import) out
of them keeps those commands fast, and lets any stage use them without paying for torch.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH_FREE = ["prefalign", "prefalign.config", "prefalign.errors", "prefalign.registry", "prefalign.training.config"]


def test_configs_errors_and_tables_import_without_torch():
    code = (
        f"import sys\nfor m in {TORCH_FREE!r}:\n    __import__(m)\n"
        "heavy = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"importing {TORCH_FREE} imported {out.stdout.strip()}"

"""Files written whole or not at all (prefalign/files.py): a failed, full or killed write leaves the previous file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prefalign.files import DiskFull, replacing, write_json, write_jsonl, write_text


def test_writes_replace_the_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "report.json"
    write_json(target, {"a": 1}, indent=2)
    write_json(target, {"b": 2})
    assert json.loads(target.read_text(encoding="utf-8")) == {"b": 2}
    write_jsonl(tmp_path / "rows.jsonl", ({"i": i} for i in range(3)))
    assert [json.loads(x) for x in (tmp_path / "rows.jsonl").read_text().splitlines()] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["report.json", "rows.jsonl"]


def test_a_failed_writer_leaves_the_previous_file_and_no_partial_one(tmp_path: Path) -> None:
    target = write_text(tmp_path / "cache.json", "complete")
    with pytest.raises(ValueError), replacing(target) as tmp:
        tmp.write_text("half of the new", encoding="utf-8")
        raise ValueError("the writer failed")
    assert target.read_text(encoding="utf-8") == "complete"
    assert [p.name for p in tmp_path.iterdir()] == ["cache.json"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device that is always full)")
def test_a_full_disk_names_the_path_and_keeps_the_previous_file(tmp_path: Path) -> None:
    target = write_json(tmp_path / "report.json", {"kept": True})
    with pytest.raises(DiskFull, match=r"disk is full: writing .*report.json failed .*previous report.json is kept"):
        with replacing(target) as tmp, open("/dev/full", "w", encoding="utf-8") as full:
            tmp.write_text("partial", encoding="utf-8")
            full.write("x" * 100)
            full.flush()  # the real ENOSPC of a full device
    assert json.loads(target.read_text(encoding="utf-8")) == {"kept": True}
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]
    with pytest.raises(DiskFull, match="nothing was written"):
        with replacing(tmp_path / "new.json"), open("/dev/full", "w", encoding="utf-8") as full:
            full.write("x")
            full.flush()
    assert not (tmp_path / "new.json").exists()


def test_a_writer_killed_mid_write_leaves_the_previous_file(tmp_path: Path) -> None:
    target = write_text(tmp_path / "scores.json", "previous")
    code = (
        "import os, signal, sys\n"
        "from prefalign.files import replacing\n"
        "with replacing(sys.argv[1]) as tmp:\n"
        "    tmp.write_text('half', encoding='utf-8')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(target)], check=False)
    assert proc.returncode == -9
    assert target.read_text(encoding="utf-8") == "previous"
    left = [p.name for p in tmp_path.iterdir() if p != target]
    assert len(left) == 1 and left[0].startswith(".scores.json.") and left[0].endswith(".tmp")  # never read as valid

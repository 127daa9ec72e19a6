"""The shared metrics folder of a multi-worker gateway."""

from __future__ import annotations

import os
from pathlib import Path

from gateway.observability.multiprocess import ENV_VAR, shared_metrics_dir


def test_one_worker_needs_no_folder() -> None:
    with shared_metrics_dir(1, None) as folder:
        assert folder is None
        assert ENV_VAR not in os.environ


def test_several_workers_get_a_temporary_folder_removed_at_exit() -> None:
    with shared_metrics_dir(2, None) as folder:
        assert folder is not None and Path(folder).is_dir()
        assert os.environ[ENV_VAR] == folder  # inherited by the workers the supervisor starts
    assert not Path(folder).exists()
    assert ENV_VAR not in os.environ


def test_a_given_folder_is_emptied_of_earlier_values(tmp_path: Path) -> None:
    (tmp_path / "counter_123.db").write_bytes(b"old")
    (tmp_path / "notes.txt").write_text("kept")
    with shared_metrics_dir(2, str(tmp_path)) as folder:
        assert folder == str(tmp_path)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert tmp_path.is_dir()

"""Whether a broker starting may lack what a previous run had not flushed (`note_host_boot`):
only after an unclean stop followed by a new boot of the host (a power cut, an OS crash); a
kill -9 leaves the page cache, and so the log, whole. The answer goes into the broker's
registration (`may_lack_unflushed`), which the controller reads when every in-sync replica of
a partition restarted (tests/unit/cluster/test_previous_run.py)."""

from __future__ import annotations

import os

from odradek.broker.server import HOST_BOOT, note_host_boot
from odradek.storage import OSFileSystem
from odradek.storage.checkpoint import CLEAN_SHUTDOWN, RECOVERY_POINT


def _ran(d: str, *, clean: bool) -> None:
    """What a run leaves: its checkpoints, and the marker of a clean shutdown or none."""
    open(os.path.join(d, RECOVERY_POINT), "w").close()
    marker = os.path.join(d, CLEAN_SHUTDOWN)
    if clean:
        open(marker, "w").close()
    elif os.path.exists(marker):
        os.remove(marker)


def test_only_an_unclean_stop_and_a_new_boot_may_have_lost_unflushed_data(tmp_path):
    fs, d = OSFileSystem(), str(tmp_path)
    assert note_host_boot(fs, [d], "boot-a") is False  # a new directory
    _ran(d, clean=False)
    assert note_host_boot(fs, [d], "boot-a") is False  # kill -9: same boot, page cache kept
    _ran(d, clean=True)
    assert note_host_boot(fs, [d], "boot-b") is False  # a clean shutdown flushed everything
    _ran(d, clean=False)
    assert note_host_boot(fs, [d], "boot-c") is True  # unclean, and the host booted since
    assert open(os.path.join(d, HOST_BOOT)).read().split() == ["boot-c", "lost"]


def test_the_loss_is_remembered_until_a_clean_shutdown(tmp_path):
    """A run after the loss may stop uncleanly again before it copied back what was lost."""
    fs, d = OSFileSystem(), str(tmp_path)
    note_host_boot(fs, [d], "boot-a")
    _ran(d, clean=False)
    assert note_host_boot(fs, [d], "boot-b") is True
    _ran(d, clean=False)
    assert note_host_boot(fs, [d], "boot-b") is True  # then a kill -9
    _ran(d, clean=True)
    assert note_host_boot(fs, [d], "boot-b") is False


def test_without_a_boot_id_nothing_is_said_lost(tmp_path):
    fs, d = OSFileSystem(), str(tmp_path)
    note_host_boot(fs, [d], "")
    _ran(d, clean=False)
    assert note_host_boot(fs, [d], "boot-a") is False  # the previous boot is unknown
    _ran(d, clean=False)
    assert note_host_boot(fs, [d], "") is False


def test_any_directory_that_stopped_uncleanly_counts(tmp_path):
    fs = OSFileSystem()
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    os.makedirs(a)
    os.makedirs(b)
    note_host_boot(fs, [a, b], "boot-a")
    _ran(a, clean=True)
    _ran(b, clean=False)
    assert note_host_boot(fs, [a, b], "boot-b") is True

"""The engine's MPS daemon (workers/engines/mps.py) against a stand-in nvidia-cuda-mps-control.

The stand-in sits at the GPU boundary: it keeps the daemon's state in a file in the pipe
folder, as the real control program keeps its socket there, and answers the commands the
engine sends (get_server_list, get_client_list, quit); the processes under its one MPS
server are the lines of a `clients` file there, as a test puts them. Whether MPS speeds the
engine up is measured on the device (docs/gpu-measurements.md), not here.
"""

import os
import stat
import tempfile
from pathlib import Path

import pytest

import workers.settings
from workers.engines import mps
from workers.runtime.engine import vllm_from_settings

QWEN = Path(__file__).parent / "data" / "qwen3-tts-0.6b-customvoice"

STAND_IN = """#!/bin/sh
# -d: start a daemon (fails if one runs on this pipe); otherwise read commands from stdin
state="$CUDA_MPS_PIPE_DIRECTORY/daemon"
echo "$@" >> "$CUDA_MPS_PIPE_DIRECTORY/calls"
if [ "$1" = "-d" ]; then
  [ -n "$REFUSE" ] && exit 1
  [ -f "$state" ] && { echo "An instance of this daemon is already running"; exit 1; }
  echo running > "$state"; echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES" >> "$state"
  exit 0
fi
[ -f "$state" ] || { echo "Cannot find MPS control daemon process"; exit 1; }
while read -r command; do
  case "$command" in
    get_server_list) if [ -s "$CUDA_MPS_PIPE_DIRECTORY/clients" ]; then echo 4242; fi ;;
    "get_client_list 4242") cat "$CUDA_MPS_PIPE_DIRECTORY/clients" ;;
    quit) rm -f "$state" ;;
  esac
done
"""


@pytest.fixture
def control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put the stand-in first on PATH and the daemons' folders under tmp_path."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / mps.CONTROL
    program.write_text(STAND_IN)
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv(mps.PIPE, raising=False)
    monkeypatch.delenv(mps.LOGS, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    monkeypatch.setattr(mps, "_visible", [])
    return tmp_path


def test_start_points_cuda_at_a_daemon_of_its_own_and_stop_quits_it(control: Path) -> None:
    folder = mps.start()
    assert folder == control / f"narrator-mps-{os.getuid()}-1"
    assert os.environ[mps.PIPE] == str(folder / "pipe")
    assert os.environ[mps.LOGS] == str(folder / "log")
    state = (folder / "pipe" / "daemon").read_text()
    assert "CUDA_VISIBLE_DEVICES=1" in state  # the daemon serves the worker's GPUs only
    mps.stop(folder)
    assert not (folder / "pipe" / "daemon").exists()
    assert mps.PIPE not in os.environ
    assert mps.LOGS not in os.environ


@pytest.mark.parametrize(("given", "counted"), [("1", "0"), ("2,3", "0,1"), ("0,1", "0,1")])
def test_under_its_daemon_the_engine_counts_gpus_as_the_daemon_sees_them(
        control: Path, monkeypatch: pytest.MonkeyPatch, given: str, counted: str) -> None:
    """A daemon started with CUDA_VISIBLE_DEVICES=1 sees one GPU, and its clients number
    GPUs among the ones it sees: a stage asking for GPU 1 under it finds none ("No CUDA GPUs
    are available", a second GPU worker on a two-H200 host). So the engine's processes see
    the set counted from 0 while the daemon serves them, and the given set again after."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", given)
    folder = mps.start()
    assert folder is not None
    assert f"CUDA_VISIBLE_DEVICES={given}" in (folder / "pipe" / "daemon").read_text()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == counted
    mps.stop(folder)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == given


def test_without_a_gpu_set_the_engine_sees_what_the_daemon_sees(
        control: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")  # a container given its one GPU
    folder = mps.start()
    assert folder == control / f"narrator-mps-{os.getuid()}-all"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    mps.stop(folder)
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_a_daemon_left_running_is_joined(control: Path) -> None:
    folder = mps.start()
    assert folder is not None
    os.environ.pop(mps.PIPE)  # as a new engine process after one that was killed
    os.environ.pop(mps.LOGS)
    assert mps.start() == folder
    calls = (folder / "pipe" / "calls").read_text().split("\n")
    assert calls.count("-d") == 2  # the second start was refused, and the daemon answered
    mps.stop(folder)


def test_two_engines_on_one_gpu_share_a_daemon_and_the_last_one_out_quits_it(
        control: Path) -> None:
    first = mps.start()
    assert first is not None
    pipe = first / "pipe"
    (pipe / "clients").write_text("101\n102\n")  # the first engine's talker and Code2Wav
    os.environ.pop(mps.PIPE)  # the second GPU worker's engine, a process of its own
    os.environ.pop(mps.LOGS)
    assert mps.start() == first
    (pipe / "clients").write_text("201\n202\n")  # the first engine's processes have ended
    mps.stop(first)
    assert (pipe / "daemon").exists()  # the second engine's processes are still under it
    assert mps.PIPE not in os.environ
    os.environ[mps.PIPE] = str(pipe)  # the second engine's process, as it runs
    (pipe / "clients").write_text("")  # its processes have ended too
    mps.stop(first)
    assert not (pipe / "daemon").exists()
    assert mps.PIPE not in os.environ


def test_each_engine_asks_the_daemon_for_its_own_priority(control: Path) -> None:
    batch = mps.start(background=True)
    assert os.environ[mps.PRIORITY] == "1"
    for name in (mps.PIPE, mps.LOGS, mps.PRIORITY):
        os.environ.pop(name)  # the realtime partition: an engine process of its own
    assert mps.start() == batch
    assert os.environ[mps.PRIORITY] == "0"
    mps.stop(batch)
    assert mps.PRIORITY not in os.environ


def test_by_default_the_batch_engine_yields_to_the_realtime_partition_under_one_daemon(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NARRATOR_MODEL", str(QWEN))
    monkeypatch.delenv("NARRATOR_VLLM_MPS", raising=False)
    workers.settings.get_settings.cache_clear()
    try:
        batch, realtime = vllm_from_settings(), vllm_from_settings(realtime=True)
    finally:
        workers.settings.get_settings.cache_clear()
    assert batch._use_mps  # one daemon for both: their kernels run side by side
    assert realtime._use_mps
    assert batch._mps_background
    assert not realtime._mps_background


def test_the_hosts_own_daemon_is_used_as_it_is(control: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(mps.PIPE, str(control / "host-pipe"))
    assert mps.start(background=True) is None
    assert os.environ[mps.PIPE] == str(control / "host-pipe")
    assert os.environ[mps.PRIORITY] == "1"
    assert not list(control.glob("narrator-mps-*"))
    mps.stop(None)
    assert mps.PRIORITY not in os.environ


def test_a_daemon_that_does_not_start_leaves_cuda_as_it_was(
        control: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REFUSE", "1")
    assert mps.start() is None
    assert mps.PIPE not in os.environ


def test_without_the_control_program_the_engine_runs_without_mps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(mps.PIPE, raising=False)
    assert mps.start() is None
    assert mps.PIPE not in os.environ
    mps.stop(None)  # nothing to stop


def test_folder_names_stay_short_for_the_socket() -> None:
    long = ",".join(f"GPU-{i:032x}" for i in range(8))
    assert len(str(mps.folder_for(long))) < 80
    assert mps.folder_for(None).name.endswith("-all")

"""bench/spy_table.py's reading of py-spy's raw folded stacks (--threads --subprocesses)."""

from pathlib import Path

from bench.spy_table import read, report

WORKER = 'process 10:"narrator worker"'
# A spawned child's command line holds a ';' (multiprocessing's spawn_main), as on the device.
ENGINE = 'process 11:"python3 -c from multiprocessing.spawn import spawn_main; spawn_main()"'
TALKER = 'process 12:"python3 -c from multiprocessing.forkserver import main; main()"'
STEP = ("run_stage_core (vllm_omni/engine/stage_engine_core_proc.py:183);"
        "GPUARModelRunner.execute_model (vllm_omni/worker/gpu_ar_model_runner.py:900)")
PROFILE = "\n".join([
    f"{WORKER};thread (10): MainThread;_epoll.poll (kombu/utils/eventio.py:83) 90",
    f"{WORKER};thread (10): MainThread;guarded (workers/jobs/quality.py:73) 10",
    f"{WORKER};{ENGINE};thread (11): orchestrator;EpollSelector.select (selectors.py:468) 100",
    f"{WORKER};{ENGINE};thread (11): MainThread;Connection._recv (connection.py:395) 100",
    f"{WORKER};{ENGINE};{TALKER};thread (12): MainThread;{STEP};"
    "_preprocess (vllm_omni/worker/gpu_model_runner.py:1751) 60",
    f"{WORKER};{ENGINE};{TALKER};thread (12): MainThread;{STEP};"
    "Event.synchronize (torch/cuda/streams.py:254) 25",
    f"{WORKER};{ENGINE};{TALKER};thread (12): MainThread;Condition.wait (threading.py:355) 15",
    f"{WORKER};{ENGINE};{TALKER};thread (13): save_loop;Condition.wait (threading.py:359) 100",
]) + "\n"
GIL = (f"{WORKER};{ENGINE};{TALKER};thread (12): MainThread;{STEP} 40\n"
       f"{WORKER};{ENGINE};{TALKER};thread (13): save_loop;_extract (x.py:1) 10\n")


def test_each_process_gets_its_role_busy_share_gpu_wait_and_gil(tmp_path: Path) -> None:
    (tmp_path / "spy.txt").write_text(PROFILE)
    (tmp_path / "gil.txt").write_text(GIL)
    processes = read(tmp_path / "spy.txt", tmp_path / "gil.txt")
    assert sorted(processes) == ["10", "11", "12"]
    assert processes["12"].parent == "11"
    table = report(processes, top=10)
    assert "| 10 | GPU worker | - | 10 % | 0 % | 0 % |" in table
    assert "| 11 | engine process | 10 | 0 % | 0 % | 0 % |" in table
    # 85 of 100 samples running (25 of them waiting on the GPU), GIL held in 50 of 100
    assert "| 12 | talker (stage 0) | 11 | 85 % | 25 % | 50 % |" in table
    talker = table.split("Main thread of 12 (talker (stage 0))")[1]
    assert "| 60 % | `_preprocess (vllm_omni/worker/gpu_model_runner.py:1751)` |" in talker
    assert "| 85 % | `GPUARModelRunner.execute_model (vllm_omni/worker/gpu_ar_model_runner.py)` |" \
        in talker
    assert "Main thread of 10" not in table  # mostly blocked: no breakdown

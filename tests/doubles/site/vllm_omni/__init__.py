"""Stands in for vLLM-Omni in worker processes that tests start: the GPU engine double.

With NARRATOR_TEST_OMNI_EVENTS set to a file, importing this package appends "import PID"
there, and creating an AsyncOmni "engine PID": a test sees which process did which, when.
"""

import json
import os
from pathlib import Path
from typing import Any

from tests.doubles.omni import SlowOmni


def record(event: str) -> None:
    """Append `event` and this process's pid to NARRATOR_TEST_OMNI_EVENTS, if set."""
    if events := os.environ.get("NARRATOR_TEST_OMNI_EVENTS"):
        with open(events, "a") as file:  # one short line per write: appends stay whole
            file.write(f"{event} {os.getpid()}\n")


record("import")


class AsyncOmni(SlowOmni):
    """SlowOmni under AsyncOmni's name; NARRATOR_TEST_OMNI_SECONDS_PER_FRAME sets its pace.

    With NARRATOR_TEST_OMNI_STEPS set to a file, every step of a realtime (priority 0)
    request appends a line there: which engine ran it (its deploy config's file name) and
    the priorities of every request that engine held at that step.
    """

    def __init__(self, model: str, **kwargs: Any) -> None:
        pace = float(os.environ.get("NARRATOR_TEST_OMNI_SECONDS_PER_FRAME", "0.002"))
        super().__init__("chunks", pace)
        record("engine")
        config = kwargs.get("deploy_config")
        if config and not Path(config).is_file():  # as vLLM-Omni fails on a missing config
            raise FileNotFoundError(config)
        self.config = Path(config or "default").name
        self.steps = os.environ.get("NARRATOR_TEST_OMNI_STEPS", "")

    def stepped(self, request_id: str) -> None:
        if self.steps and self.held.get(request_id) == 0:
            line = json.dumps({"engine": self.config, "pid": os.getpid(), "request": request_id,
                               "held": sorted(self.held.values())})
            with open(self.steps, "a") as log:  # one short line per write: appends stay whole
                log.write(line + "\n")

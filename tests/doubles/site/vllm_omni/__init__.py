"""Stands in for vLLM-Omni in worker processes that tests start: the GPU engine double."""

import os
from typing import Any

from tests.doubles.omni import SlowOmni


class AsyncOmni(SlowOmni):
    """SlowOmni under AsyncOmni's name; NARRATOR_TEST_OMNI_SECONDS_PER_FRAME sets its pace."""

    def __init__(self, model: str, **_: Any) -> None:
        pace = float(os.environ.get("NARRATOR_TEST_OMNI_SECONDS_PER_FRAME", "0.002"))
        super().__init__("chunks", pace)

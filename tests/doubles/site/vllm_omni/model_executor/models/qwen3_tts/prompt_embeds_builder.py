"""The talker prompt length, as the stand-in engine needs it (any length will do)."""

from typing import Any


class Qwen3TTSPromptEmbedsBuilder:
    """Estimates prompt lengths like vLLM-Omni's, from the text's length."""

    @staticmethod
    def estimate_prompt_len_from_additional_information(
            additional_information: dict[str, list[Any]], **_: Any) -> int:
        """Return a prompt length for the request."""
        return 10 + len(additional_information["text"][0])

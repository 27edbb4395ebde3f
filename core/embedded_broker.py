"""The embedded broker: kombu's filesystem transport, with messages written atomically.

kombu's own `_put` opens the final file name and then writes into it, so a consumer polling
the folder can take the file while it is still empty and fail to parse it (the worker then
stops with "Unrecoverable error: JSONDecodeError"). Here each message is written under a
hidden temporary name and renamed into place, which is atomic on one filesystem.
"""

import os
import uuid
from time import monotonic
from typing import Any

from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

SCHEME = "narratorfs"


class Channel(filesystem.Channel):
    """A filesystem channel whose messages appear whole or not at all."""

    # The stubs of kombu's two base classes disagree on this signature.
    def _put(self, queue: str, payload: dict[str, Any], **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        # The leading dot keeps consumers from matching the name until it is renamed.
        temporary = os.path.join(self.data_folder_out, f".{name}.tmp")
        with open(temporary, "wb") as f:
            f.write(str_to_bytes(dumps(payload)))
        os.replace(temporary, final)


class Transport(filesystem.Transport):
    """kombu's filesystem transport with the atomic channel."""

    Channel = Channel


TRANSPORT_ALIASES[SCHEME] = f"{__name__}:Transport"

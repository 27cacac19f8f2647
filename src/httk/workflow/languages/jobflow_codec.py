"""jobflow objects as plain JSON and back, the way jobflow serializes them (``monty``).

Pure helpers shared by submission (:mod:`..operations.language_jobs`) and the
runner-side engine (:mod:`.jobflow_runner`): importing this module imports
neither jobflow nor the SDK; ``monty`` is imported on the first call.
"""

from __future__ import annotations

import json
from typing import Any


def encode(obj: Any) -> Any:
    """A jobflow object (a ``Flow``, a ``Job``, a document) as plain JSON, the way jobflow serializes it."""
    from monty.json import MontyEncoder

    document = obj.as_dict() if hasattr(obj, "as_dict") else obj
    return json.loads(json.dumps(document, cls=MontyEncoder, allow_nan=False))


def decode(document: Any) -> Any:
    """The jobflow object a document from :func:`encode` describes."""
    from monty.json import MontyDecoder

    return MontyDecoder().process_decoded(document)


def referenced_modules(document: Any) -> list[str]:
    """The top-level modules the ``@module`` keys of an encoded document name: what decoding it imports."""
    found: set[str] = set()
    pending = [document]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            module = item.get("@module")
            if isinstance(module, str) and module:
                found.add(module.split(".", 1)[0])
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return sorted(found)

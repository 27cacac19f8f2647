"""One contract for every transport registered in ``httk.workflow.transports``, and the replay double.

Parametrized from the installed entry points: ``local`` runs here; ``ssh`` runs against the
sshd of tests/infra (skipped with how to start it when that is absent, like tests/remote);
a plug-in transport is built with ``from_settings`` of the JSON in
``$HTTK_CONTRACT_TRANSPORT_<NAME>`` (skipped without it). The same checks then run on a
:class:`~httk.workflow.testing.ReplayTransport` replaying what the local transport did,
so the double is held to the real thing (ARCHITECTURE.md rule 5).
"""

from __future__ import annotations

import json
import os
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from httk.workflow.adapters.plugins import TRANSPORTS, EntryPointCatalog
from httk.workflow.testing import RecordingTransport, ReplayTransport
from httk.workflow.testing.replay import load_exchanges

NAMES = sorted({entry.name for entry in entry_points(group=TRANSPORTS)})
INFRA = Path(os.environ.get("CI_INFRA_DIR", "/var/lib/ci-slurm-ssh")) / "env"


def settings_for(name: str) -> dict[str, Any]:
    if name == "local":
        return {}
    if name == "ssh":
        if not INFRA.is_file():
            pytest.skip(f"no SSH test infrastructure ({INFRA} is absent): as root run 'make infra'")
        env = dict(line.split("=", 1) for line in INFRA.read_text().splitlines() if "=" in line and line[0] != "#")
        return {"host": env["CI_SSH_HOST"], "port": int(env["CI_SSH_PORT"]), "username": env["CI_SSH_USER"],
                "key_filename": env["CI_SSH_KEY"], "known_hosts": env["CI_SSH_KNOWN_HOSTS"], "connect_timeout": 5}
    given = os.environ.get(f"HTTK_CONTRACT_TRANSPORT_{name.upper()}")
    if not given:
        pytest.skip(f"set HTTK_CONTRACT_TRANSPORT_{name.upper()} to the JSON settings of a {name} target")
    return json.loads(given)


def exercise(transport: Any) -> None:
    """What every RemoteTransport promises the batch systems and the forwarded commands."""
    words = ["a b", "$(touch INJECTED)", "it's", "", "*"]
    echoed = transport.run(["sh", "-c", 'printf "[%s]" "$@"', "sh", *words])
    assert (echoed.returncode, echoed.stdout) == (0, "".join(f"[{word}]" for word in words))
    assert transport.run(["cat"], input="one\ntwo\n").stdout == "one\ntwo\n"
    assert transport.run(["cat"]).stdout == ""  # no input: an empty stdin
    split = transport.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (split.returncode, split.stdout, split.stderr) == (3, "out\n", "err\n")
    assert transport.run(["no-such-program-httk-contract"]).returncode == 127
    out: list[bytes] = []
    err: list[bytes] = []
    code = transport.stream(["sh", "-c", "echo streamed; echo oops >&2; exit 4"], out=out.append, err=err.append)
    assert (code, b"".join(out), b"".join(err)) == (4, b"streamed\n", b"oops\n")
    transport.close()
    assert transport.run(["echo", "again"]).stdout == "again\n"  # a closed transport reconnects
    transport.close()


@pytest.mark.parametrize("name", NAMES)
def test_every_registered_transport_keeps_the_contract(name):
    transport_class = EntryPointCatalog().transport(name)
    assert transport_class is not None and transport_class.name == name
    assert transport_class.description and not transport_class.description.endswith(".")
    exercise(transport_class.from_settings(settings_for(name)))


def test_the_replay_double_keeps_it_on_what_the_local_transport_did():
    recorder = RecordingTransport(EntryPointCatalog().transport("local").from_settings({}))
    exercise(recorder)
    document = recorder.document("this test, LocalTransport")
    replayed = ReplayTransport.from_document(json.loads(json.dumps(document)))
    exercise(replayed)
    replayed.assert_done()
    assert len(load_exchanges(document)) == 7  # the seven commands of exercise()

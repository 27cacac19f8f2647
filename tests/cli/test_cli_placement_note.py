"""A --placement that matches no job says so on stderr, with the placement it is likely a typo of."""

from __future__ import annotations

import json


def test_job_list_and_collect_name_the_nearest_placement(cli, workspace, payload):
    cli("job", "submit", workspace, str(payload), "--placement", "hand/ws")
    listed = cli("job", "list", workspace, "--placement", "hnad")
    assert listed.stdout == "no jobs\n"
    assert listed.stderr == "note: no job is at or below placement 'hnad' (did you mean 'hand'?)\n"
    as_json = cli("job", "list", workspace, "--placement", "hand/sw", "--json")
    assert json.loads(as_json.stdout) == []
    assert as_json.stderr == "note: no job is at or below placement 'hand/sw' (did you mean 'hand/ws'?)\n"
    far = cli("collect", workspace, "--placement", "zzz")
    assert far.stdout == "" and far.stderr == "note: no job is at or below placement 'zzz'\n"
    # A placement that holds jobs, none of the asked kinds: no note, the answer is just empty.
    quiet = cli("job", "list", workspace, "--placement", "hand", "--kind", "failed")
    assert (quiet.stdout, quiet.stderr) == ("no jobs\n", "")
    assert cli("collect", workspace, "--placement", "hand").stderr == ""

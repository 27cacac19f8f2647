from __future__ import annotations

import pytest
from svc_support import ROOT

from httk.workflow.services.workspaces import WorkspaceHandle, WorkspaceService
from httk.workflow.testing import memory_ports


@pytest.fixture
def ports():
    return memory_ports()


@pytest.fixture
def handle(ports) -> WorkspaceHandle:
    return WorkspaceService(ports).init(ROOT)

"""Where the head finds a job's driver log (``oncluster.joblogs.locate``), for a Ray job the queue
does not know whose node no longer serves its log (fast tier, fakes of the service and Ray).

It was an AttributeError (reading the missing record's ``log``), a 500 from the door for
``rayjobs logs raysubmit_...`` through a team door; now the one line every reader shows."""

from __future__ import annotations

from types import SimpleNamespace

from rayjobs.oncluster import joblogs


class GoneNode:
    """A dashboard whose node does not serve the file any more."""

    def iter_file(self, params, follow=False):
        raise OSError("node gone")


def test_a_foreign_jobs_log_on_a_gone_node_is_one_line_not_a_crash(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(joblogs, "local_path", lambda svc, job_id: None)
    details = {"status": "SUCCEEDED", "driver_node_id": "n1"}
    svc = SimpleNamespace(records={}, jobs=SimpleNamespace(details=lambda job_id: details))
    found = joblogs.locate(svc, GoneNode(), "raysubmit_x")
    assert found is not None and found.kind == "none", found
    assert "no log of raysubmit_x is left" in found.text and "on node n1" in found.text
    assert joblogs.locate(SimpleNamespace(records={}, jobs=SimpleNamespace(details=lambda i: None)),
                          GoneNode(), "nosuch") is None  # Ray does not know it either

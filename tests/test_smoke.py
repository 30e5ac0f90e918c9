"""The spine end to end: compose -> JobSpec -> a real Ray job on the embedded head."""

from conftest import rayjobs_submit, wait_terminal


def test_submit_runs_fake_verl_to_success(cluster, client, workdir):
    r = rayjobs_submit("+exp=fake_ppo", "trainer.total_epochs=2", cwd=workdir)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    assert job_id.startswith("fake_ppo-") and "\n" not in job_id
    assert f"rayjobs tail {job_id}" in r.stderr
    assert wait_terminal(client, job_id) == "SUCCEEDED", client.get_job_logs(job_id)
    log = client.get_job_logs(job_id)
    assert "step:5 - " in log and "trainer.total_epochs=2" in client.get_job_info(job_id).entrypoint

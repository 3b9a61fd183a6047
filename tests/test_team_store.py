"""A team's store on a real database: `mlflow server` on PostgreSQL (this machine's own, started by the test on a free
loopback port, ended by the process group it started), three invocations of a tiny project logging into it at once
from three copies, one killed mid-run and resumed, the server restarted while they run. Every run is logged exactly
once (counted by its uid tag, and in the database's own table), every parent FINISHED, and each invocation says how
long it waited on the store."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mlflow
import pytest
from conftest import MlflowServer, closed_port, make_project, project_env, run_ok, set_params

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("postgres")]
MODELS = ["microsoft/resnet-50"]
RUNS_PER_INVOCATION = 2  # eager + default


def postgres_tool(name: str) -> str | None:
    """A PostgreSQL program: on PATH, else Debian's (/usr/lib/postgresql/VERSION/bin), the newest."""
    found = shutil.which(name) or next(
        iter(sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True)), None
    )
    return str(found) if found else None


def as_postgres(command: list[str]) -> list[str]:
    """initdb and postgres refuse to run as root: there, the `postgres` user runs them."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


class Database:
    """A PostgreSQL cluster of its own in a fresh folder, on 127.0.0.1 only, trusting local connections; fsync off, as
    a test may. As root the folder is the `postgres` user's, right under /tmp: the tests' own temporary folders (and
    TMPDIR under `make test`) are 0700 root's, which that user cannot enter."""

    def __init__(self) -> None:
        root = os.geteuid() == 0
        self.folder = Path(tempfile.mkdtemp(prefix="compilebench-postgres-", dir="/tmp" if root else None))
        if root:
            shutil.chown(self.folder, "postgres")
        self.port, self.process = closed_port(), None
        self.env = {**os.environ, "TMPDIR": str(self.folder)}  # not the tests' own, which that user cannot enter
        self.uri = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        initdb = [
            postgres_tool("initdb"),
            "-D",
            str(self.folder / "data"),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ]
        try:
            run_ok(as_postgres(initdb), self.folder, self.env)
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise

    def start(self) -> None:
        command = [
            postgres_tool("postgres"),
            "-D",
            str(self.folder / "data"),
            "-p",
            str(self.port),
            "-k",
            str(self.folder),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",
        ]
        self.process = subprocess.Popen(
            as_postgres(command),
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        ready = [postgres_tool("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"]
        deadline = time.time() + 60
        while subprocess.run(ready).returncode != 0:
            assert self.process.poll() is None and time.time() < deadline, "PostgreSQL did not start"
            time.sleep(0.3)

    def rows(self, sql: str) -> list[tuple]:
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres") as connection:
            return connection.execute(sql).fetchall()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)  # PostgreSQL's fast shutdown, to the group we started
            self.process.wait(timeout=60)
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    if not (postgres_tool("initdb") and postgres_tool("postgres") and postgres_tool("pg_isready")):
        pytest.skip("no PostgreSQL here (Debian's postgresql package)")
    database = Database()
    server = MlflowServer(tmp_path_factory.mktemp("server"), backend=database.uri)
    try:
        database.start()
        server.start()  # its first start creates MLflow's tables in PostgreSQL
        yield database, server
    finally:
        if server.process is not None and server.process.poll() is None:
            server.stop()
        database.stop()


def benchmark(root: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "compilebench.benchmark"],
        cwd=root,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def test_three_invocations_log_at_once_into_postgresql_each_run_once_through_a_kill_and_a_restart(
    store, tmp_path_factory
):
    database, server = store
    env = {**project_env(), "MLFLOW_TRACKING_URI": server.uri}
    first = make_project(tmp_path_factory.mktemp("team-a"), MODELS)
    for stage in ("fetch_image", "load_models"):
        run_ok([sys.executable, "-m", f"compilebench.{stage}"], first, env)
    roots = [first]
    for name in ("b", "c"):  # the same project cloned twice, as three machines of a team would have it
        roots.append(tmp_path_factory.mktemp(f"team-{name}"))
        shutil.copytree(first, roots[-1], dirs_exist_ok=True, symlinks=True)
    set_params(roots[0], **{"benchmark.replicates": 2})  # two timing processes: killed between them
    running = [benchmark(root, env) for root in roots]
    journal = roots[0] / "data" / "journal" / "results"
    deadline = time.time() + 600
    while time.time() < deadline and not list(journal.glob("*.json")):
        assert running[0].poll() is None, running[0].communicate()[1][-3000:]
        time.sleep(0.1)
    os.killpg(running[0].pid, signal.SIGKILL)  # a's benchmark mid-run (its trial ends with it)
    running[0].wait()
    server.stop()  # the server restarted while b and c run: their calls meanwhile fail, or wait and retry
    time.sleep(2)
    server.start()
    running[0] = benchmark(roots[0], env)  # a resumes from its journal
    logs = []
    for process in running:
        logs.append(process.communicate(timeout=1200)[1])
        assert process.returncode == 0, logs[-1][-4000:]
        assert "this invocation waited " in logs[-1] and " s on it, over " in logs[-1], logs[-1][-2000:]
    assert "resuming interrupted invocation" in logs[0], logs[0][-2000:]
    for root in roots:  # whatever the restart kept from the store, logged now: exactly once
        run_ok([sys.executable, "-m", "compilebench.sync"], root, env)

    mlflow.set_tracking_uri(server.uri)
    every = mlflow.search_runs(experiment_names=["compilebench"], max_results=10000)
    invocations = []
    for root in roots:
        info = json.loads((root / "data/results/run_info.json").read_text())
        invocations.append(info["invocation_id"])
        assert info["store_calls"] >= RUNS_PER_INVOCATION + 1 and info["store_s"] > 0, info  # the runs and the parent
        mine = every[every["tags.compilebench.invocation"] == info["invocation_id"]]
        children = mine[mine["tags.role"] == "measurement"]
        assert len(children) == RUNS_PER_INVOCATION and children["tags.compilebench.run_uid"].is_unique, root
        assert set(children["status"]) == {"FINISHED"}
        [parent] = mine[mine["tags.role"] == "pipeline"].itertuples()
        assert parent.status == "FINISHED"
    assert len(set(invocations)) == 3
    [(runs,)] = database.rows("select count(*) from runs where lifecycle_stage = 'active'")
    assert runs == 3 * (RUNS_PER_INVOCATION + 1)  # in PostgreSQL itself: three parents and their runs, none twice

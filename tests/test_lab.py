"""`make lab` works: JupyterLab from this venv serves its front end and the notebooks, and
the venv's kernel (the one `make lab` registers) runs `import txl_minimal`.

One real server on 127.0.0.1 with a token, a free port and temporary Jupyter folders;
the kernel is driven over the REST API and its websocket, as the browser would.
Nothing is downloaded and no browser is started; the whole test is bounded by DEADLINE.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

pytest.importorskip("jupyterlab", reason="jupyterlab is not installed in this environment "
                    "(it comes with requirements-dev.txt or `pip install -e .[notebooks]`)")

import txl_minimal  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOK = "01_context_fragmentation.ipynb"
DEADLINE = 90.0  # seconds for the whole test: server start, kernel start, one cell


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def venv_kernel(specs: dict) -> str | None:
    """Name of a kernelspec that runs this interpreter (the venv's python, by absolute path)."""
    me = os.path.abspath(sys.executable)
    for name, k in specs["kernelspecs"].items():
        if os.path.abspath(k["spec"]["argv"][0]) == me:
            return name
    return None


def ensure_venv_kernel() -> None:
    """Register the kernel as `make lab` does, if it is not there yet (into sys.prefix)."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_all_specs().get("python3")
    if spec is None or spec["spec"]["argv"][0] != sys.executable:
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix", "--name", "python3"],
                       check=True, capture_output=True, timeout=30)


class Lab:
    """A JupyterLab server started from this interpreter; HTTP helpers with the token."""

    def __init__(self, tmp: Path, extra: tuple[str, ...] = ()):
        """``extra``: more command-line flags (tests/e2e adds the browser's)."""
        self.port, self.token = free_port(), secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "server.log"
        env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
               "JUPYTER_CONFIG_DIR": str(tmp / "config"), "JUPYTER_DATA_DIR": str(tmp / "data")}
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
               f"--port={self.port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={NOTEBOOKS}"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")  # containers; the server refuses root otherwise
        cmd += extra
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)  # its kernels share the group

    def request(self, path: str, data: dict | None = None, timeout: float = 10.0) -> bytes:
        req = urllib.request.Request(self.base + path, headers={"Authorization": f"token {self.token}"},
                                     data=None if data is None else json.dumps(data).encode(),
                                     method="GET" if data is None else "POST")
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.read()

    def json(self, path: str, data: dict | None = None, timeout: float = 10.0) -> dict:
        return json.loads(self.request(path, data, timeout))

    def wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"JupyterLab exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                self.request("/api/status", timeout=2)
                return
            except (urllib.error.URLError, OSError):
                time.sleep(0.3)
        raise AssertionError(f"JupyterLab did not answer on {self.base}:\n{self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def stop(self) -> None:
        """SIGTERM lets the server shut its kernels down; SIGKILL of its group if it hangs."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything of ours still alive
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait(5)


async def execute(lab: Lab, kernel_id: str, code: str, timeout: float) -> tuple[dict, str]:
    """Run ``code`` over the kernel's websocket (Jupyter messaging, execute_request);
    returns the execute_reply's content and everything printed to stdout."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    ws_url = f"ws://127.0.0.1:{lab.port}/api/kernels/{kernel_id}/channels"
    ws = await asyncio.wait_for(websocket_connect(
        HTTPRequest(ws_url, headers={"Authorization": f"token {lab.token}"})), timeout)
    msg_id = uuid.uuid4().hex
    ws.write_message(json.dumps({
        "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "test",
                   "session": uuid.uuid4().hex, "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                    "allow_stdin": False, "stop_on_error": True}}))
    reply, stdout, idle = None, [], False
    try:
        while reply is None or not idle:  # the reply (shell) and the idle status (iopub) may come in any order
            raw = await asyncio.wait_for(ws.read_message(), timeout)
            assert raw is not None, "the kernel's websocket closed"
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["header"]["msg_type"], msg["content"]
            if kind == "execute_reply":
                reply = content
            elif kind == "stream" and content["name"] == "stdout":
                stdout.append(content["text"])
            elif kind == "error":
                stdout.append("\n".join(content["traceback"]))
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
    finally:
        ws.close()
    return reply, "".join(stdout)


def test_jupyterlab_serves_notebooks_and_runs_the_venv_kernel(tmp_path):
    start = time.monotonic()
    deadline = start + DEADLINE
    ensure_venv_kernel()
    lab = Lab(tmp_path)
    try:
        lab.wait_ready(deadline)

        # the JupyterLab front end, not only a bare jupyter_server
        page = lab.request("/lab").decode()
        config = json.loads(re.search(r'<script id="jupyter-config-data"[^>]*>(.*?)</script>', page, re.S)[1])
        assert config["appName"] == "JupyterLab" and Path(config["serverRoot"]) == NOTEBOOKS
        bundle = re.search(r'src="(/static/lab/main\.[^"?]+\.js)', page)
        assert bundle, "the /lab page links no JupyterLab bundle"
        assert len(lab.request(bundle[1])) > 10_000

        # the kernel `make lab` registers: this venv's python
        specs = lab.json("/api/kernelspecs")
        name = venv_kernel(specs)
        assert name, f"no kernelspec runs {sys.executable}: {json.dumps(specs['kernelspecs'])[:500]}"

        # notebook 01 opens, and asks for that kernel
        nb = lab.json(f"/api/contents/{NOTEBOOK}")
        stored = json.loads((NOTEBOOKS / NOTEBOOK).read_text(encoding="utf-8"))
        assert nb["type"] == "notebook" and len(nb["content"]["cells"]) == len(stored["cells"])
        assert nb["content"]["metadata"]["kernelspec"]["name"] == name

        # start it through the REST API and run one cell over its websocket
        kernel = lab.json("/api/kernels", {"name": name}, timeout=30)
        code = "import sys, txl_minimal\nprint(sys.executable)\nprint(txl_minimal.__file__)"
        reply, out = asyncio.run(execute(lab, kernel["id"], code, max(5.0, deadline - time.monotonic())))
        assert reply["status"] == "ok", out
        assert out.split() == [sys.executable, txl_minimal.__file__]
    except Exception as e:
        raise AssertionError(f"{e}\n--- server log ---\n{lab.tail()}") from e
    finally:
        lab.stop()
    assert time.monotonic() - start < DEADLINE + 30

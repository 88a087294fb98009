#!/usr/bin/python3
"""A throwaway PostgreSQL server for the shared-store tests: initdb in a temporary folder, one
server on a free 127.0.0.1 port, a role `baton` with a password (scram-sha-256, as a deployment
has) and a database `baton`. PostgreSQL refuses to run as root, so when the tests run as root the
server runs as Debian's `postgres` user (the postgresql package creates it), and the folders
above DIR get search permission (o+x) where they lack it.

  pg_cluster.py start DIR   starts one in DIR (created); prints its URL; DIR/url and
                            DIR/password hold what a client needs
  pg_cluster.py restart DIR [DOWN_S]
                            stops the server (open connections are cut), waits DOWN_S
                            seconds (default 0), starts it again on its port
  pg_cluster.py stop DIR    stops it and removes DIR

As a module: cluster(dir).start() / .stop() / .restart() / .url / .password.
"""

import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import time

BINDIR = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
PASSWORD = "baton-test-password"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class cluster:
    def __init__(self, folder):
        self.folder = os.path.abspath(folder)
        self.data = os.path.join(self.folder, "data")
        self.password = PASSWORD
        self.port = None
        self.owner = pwd.getpwnam("postgres") if os.geteuid() == 0 else None

    def _run(self, *argv, check=True):
        if self.owner:
            argv = ("runuser", "-u", "postgres", "--") + argv
        return subprocess.run(argv, capture_output=True, text=True, check=check)

    @property
    def url(self):
        return f"postgresql://baton@127.0.0.1:{self.port}/baton"

    def start(self):
        os.makedirs(self.folder, exist_ok=True)
        if self.owner:
            os.chown(self.folder, self.owner.pw_uid, self.owner.pw_gid)
            # The server's user must reach its folder: a private temporary folder above it (mode
            # 0700) gets search permission for others, not the right to list it.
            parent = os.path.dirname(self.folder)
            while parent != os.path.dirname(parent):
                mode = os.stat(parent).st_mode
                if not mode & stat.S_IXOTH:
                    os.chmod(parent, stat.S_IMODE(mode) | stat.S_IXOTH)
                parent = os.path.dirname(parent)
        password_file = os.path.join(self.folder, "password")
        with open(password_file, "w") as f:
            f.write(self.password + "\n")
        if self.owner:
            os.chown(password_file, self.owner.pw_uid, self.owner.pw_gid)
        self._run(os.path.join(BINDIR, "initdb"), "-D", self.data, "-U", "baton", "--auth=scram-sha-256",
                  f"--pwfile={password_file}", "--encoding=UTF8", "--locale=C", "--no-sync")
        self.port = free_port()
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            # Loopback only, no Unix socket in a shared folder; fsync on, as a deployment runs it.
            f.write(f"listen_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = ''\n"
                    "max_connections = 100\nshared_buffers = 64MB\n")
        self._start_server()
        env = dict(os.environ, PGPASSWORD=self.password)
        subprocess.run([os.path.join(BINDIR, "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "baton",
                        "baton"], env=env, check=True, capture_output=True)
        with open(os.path.join(self.folder, "url"), "w") as f:
            f.write(self.url + "\n")
        return self

    def _start_server(self):
        self._run(os.path.join(BINDIR, "pg_ctl"), "-D", self.data, "-l", os.path.join(self.folder, "server.log"),
                  "-w", "-t", "60", "start")

    def stop_server(self, mode="fast"):
        self._run(os.path.join(BINDIR, "pg_ctl"), "-D", self.data, "-m", mode, "-w", "-t", "60", "stop",
                  check=False)

    def restart(self, down_s=0.0):
        """Stops the server (fast: open connections are cut), waits down_s, starts it again."""
        self.stop_server()
        time.sleep(down_s)
        self._start_server()

    def stop(self):
        if os.path.isdir(self.data):
            self.stop_server("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("start", "stop", "restart") or len(sys.argv) > 4:
        sys.exit(__doc__)
    c = cluster(sys.argv[2])
    if sys.argv[1] == "start":
        if os.path.exists(os.path.join(c.data, "PG_VERSION")):
            c.stop()  # a cluster a killed run left behind
        print(c.start().url)
    elif sys.argv[1] == "restart":
        c.restart(float(sys.argv[3]) if len(sys.argv) == 4 else 0.0)
    else:
        c.stop()


if __name__ == "__main__":
    main()

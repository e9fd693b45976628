"""What the real-client tiers share: the token, the shell's tell-tale output, and a client run as
a user's machine would run it (its own HOME, nothing of this machine's keys)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

TOKEN = "real-client-tier-" + "t" * 24


SHELL_SAID = "agy-sim-42"  # what `echo agy-sim-$((6 * 7))` prints, in a real shell only


SHELL_ANSWER = "The client's shell printed: "


RUN_TIMEOUT = 240


# What a user's own machine has, and nothing of this one's keys or settings.
PASSED_ON = ("PATH", "LANG", "LC_ALL", "TMPDIR", "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS")


def client_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in PASSED_ON if k in os.environ}
    return {**env, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), **extra}


def run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv,
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    return done

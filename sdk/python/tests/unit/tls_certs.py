"""A CA and a serving certificate for 127.0.0.1, as kubicle-node makes
them (ECDSA P-256, the address in the SANs), for the TLS tests. Made with
the openssl command line, which the e2e harness needs anyway: no Python
dependency beyond the SDK's."""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Tuple


@dataclass
class Ca:
    pem: str
    cert_file: str
    key_file: str


def _run(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(cn: str = "kubicle-node n1 serving CA") -> Ca:
    d = tempfile.mkdtemp(prefix="kubicle-sdk-ca-")
    crt, key = os.path.join(d, "ca.crt"), os.path.join(d, "ca.key")
    _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-days", "1", "-subj", f"/CN={cn}", "-keyout", key, "-out", crt,
         "-addext", "basicConstraints=critical,CA:TRUE,pathlen:0",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    with open(crt) as f:
        return Ca(f.read(), crt, key)


def serving_pair(dir_: str, ca: Ca, host: str = "127.0.0.1") -> Tuple[str, str]:
    """(certificate file, key file) for the address `host`, signed by `ca`."""
    crt, key, csr = (os.path.join(dir_, n) for n in ("tls.crt", "tls.key", "tls.csr"))
    ext = os.path.join(dir_, "tls.ext")
    with open(ext, "w") as f:
        f.write(f"subjectAltName=IP:{host}\nextendedKeyUsage=serverAuth\n"
                "basicConstraints=critical,CA:FALSE\n")
    _run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-subj", f"/CN={host}", "-keyout", key, "-out", csr)
    _run("x509", "-req", "-in", csr, "-CA", ca.cert_file, "-CAkey", ca.key_file,
         "-CAcreateserial", "-days", "1", "-extfile", ext, "-out", crt)
    return crt, key

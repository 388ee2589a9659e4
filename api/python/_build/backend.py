"""A PEP 517 build backend in the standard library only.

`pip install ./api/python` builds the wheel with this file instead of
setuptools, so installing the client needs no package index (the client itself
has no dependencies either). It packs gantry/*.py into a pure-Python wheel.
"""

import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME = "gantry_client"
DIST = "gantry-client"
VERSION = "0.2.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

METADATA = f"""Metadata-Version: 2.1
Name: {DIST}
Version: {VERSION}
Summary: Gantry's Python client for notebooks: launch, wait, logs, metrics, advice (standard library only)
Requires-Python: >=3.9
"""

WHEEL = """Wheel-Version: 1.0
Generator: gantry-backend
Root-Is-Purelib: true
Tag: py3-none-any
"""


def _sources():
    pkg = os.path.join(ROOT, "gantry")
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            yield "gantry/" + name, os.path.join(pkg, name)


def _digest(data):
    d = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(d).rstrip(b"=").decode()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    filename = f"{NAME}-{VERSION}-py3-none-any.whl"
    info = f"{NAME}-{VERSION}.dist-info"
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as whl:
        def add(arcname, data):
            whl.writestr(arcname, data)
            records.append(f"{arcname},{_digest(data)},{len(data)}")

        for arcname, path in _sources():
            with open(path, "rb") as f:
                add(arcname, f.read())
        add(info + "/METADATA", METADATA.encode())
        add(info + "/WHEEL", WHEEL.encode())
        records.append(f"{info}/RECORD,,")
        whl.writestr(info + "/RECORD", "\n".join(records) + "\n")
    return filename


def build_sdist(sdist_directory, config_settings=None):
    base = f"{DIST}-{VERSION}"
    filename = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tar:
        for rel in ["pyproject.toml", "_build/backend.py"] + [a for a, _ in _sources()]:
            tar.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        data = METADATA.encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(data)
        tar.addfile(ti, io.BytesIO(data))
    return filename

"""A PEP 517 build backend of a few lines, copied into the tiny projects of test_pyenv:
offline, this machine has no setuptools wheel to build with, and a wheel is only a zip with
three metadata files. The project's `PROJECT` file says `name|version|requires|src dir`."""

import base64
import hashlib
import os
import pathlib
import zipfile


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    here = pathlib.Path(__file__).parent
    name, version, requires, src = (here / "PROJECT").read_text().split("|")
    info = f"{name}-{version}.dist-info"
    files = {
        str(p.relative_to(here / src)): p.read_bytes()
        for p in (here / src).rglob("*.py")
        if p.name != "backend.py"
    }
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    metadata += [f"Requires-Dist: {r}" for r in requires.split(",") if r]
    files[f"{info}/METADATA"] = "\n".join([*metadata, ""]).encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = [f"{p},sha256={_digest(d)},{len(d)}" for p, d in files.items()]
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,", ""]).encode()
    wheel = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w") as out:
        for path, data in files.items():
            out.writestr(path, data)
    return wheel

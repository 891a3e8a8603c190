"""Generate the Python gRPC stubs in `services/api/v1/` from `proto/etude/api/v1/`.

`make proto` runs this; a test runs it into a temporary directory and fails when the
committed stubs differ, so the stubs can never drift from the contract. The generated
files are never edited by hand.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = REPO_ROOT / "proto"
PROTO_PACKAGE = Path("etude/api/v1")
STUBS_DIR = REPO_ROOT / "services/api/v1"

INIT_TEXT = '"""Generated gRPC stubs of the etude.api.v1 contract. DO NOT EDIT: run `make proto`."""\n'


def proto_files() -> list[Path]:
    return sorted((PROTO_ROOT / PROTO_PACKAGE).glob("*.proto"))


def generate(out_dir: Path) -> list[Path]:
    """Write the stubs of every proto file into `out_dir`; return the files written."""
    with tempfile.TemporaryDirectory() as scratch:
        # grpc_tools bundles the well-known types (google/protobuf/*.proto).
        well_known = Path(protoc.__file__).parent / "_proto"
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--python_out={scratch}",
            f"--pyi_out={scratch}",
            f"--grpc_python_out={scratch}",
            *(str(p.relative_to(PROTO_ROOT)) for p in proto_files()),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed; see the messages above")
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for generated in sorted((Path(scratch) / PROTO_PACKAGE).iterdir()):
            target = out_dir / generated.name
            shutil.copyfile(generated, target)
            written.append(target)
    init = out_dir / "__init__.py"
    init.write_text(INIT_TEXT)
    return [init, *written]


def main() -> int:
    for stale in STUBS_DIR.glob("*_pb2*.py*"):
        stale.unlink()
    for path in generate(STUBS_DIR):
        print(path.relative_to(REPO_ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())

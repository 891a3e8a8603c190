"""The committed stubs are exactly what the contract generates."""

from __future__ import annotations

import filecmp

from etude.api import codegen


def test_committed_stubs_match_a_fresh_generation(tmp_path):
    written = codegen.generate(tmp_path)
    fresh = {p.name for p in written}
    committed = {p.name for p in codegen.STUBS_DIR.iterdir() if p.is_file()}
    assert committed == fresh, "stub files differ from the proto files: run `make proto`"
    stale = [
        name
        for name in sorted(fresh)
        if not filecmp.cmp(tmp_path / name, codegen.STUBS_DIR / name, shallow=False)
    ]
    assert not stale, f"stale stubs {stale}: run `make proto` and commit the result"


def test_every_proto_file_has_stubs():
    protos = {p.stem for p in codegen.proto_files()}
    assert protos == {"common", "environment", "inference", "search", "reward"}
    for stem in protos:
        assert (codegen.STUBS_DIR / f"{stem}_pb2.py").is_file()


def test_a_changed_proto_is_detected(tmp_path, monkeypatch):
    # Copy the contract, change one comment-free field name, and generate from the copy.
    proto_copy = tmp_path / "proto"
    src = codegen.PROTO_ROOT / codegen.PROTO_PACKAGE
    (proto_copy / codegen.PROTO_PACKAGE).mkdir(parents=True)
    for proto in src.glob("*.proto"):
        text = proto.read_text()
        if proto.name == "reward.proto":
            text = text.replace("double reward = 1;", "double score = 1;")
        (proto_copy / codegen.PROTO_PACKAGE / proto.name).write_text(text)
    monkeypatch.setattr(codegen, "PROTO_ROOT", proto_copy)
    out = tmp_path / "out"
    codegen.generate(out)
    assert not filecmp.cmp(
        out / "reward_pb2.py", codegen.STUBS_DIR / "reward_pb2.py", shallow=False
    )

"""Credentials: a bearer token per role, who may call what, and the gRPC plumbing for both ends.

A caller proves a role by presenting that role's token (`authorization: Bearer <token>`).
Tokens live in one directory, one file per role, as a Kubernetes Secret mounts them:
`<dir>/<role>` holds a token (what a process presents), `<dir>/<role>.sha256` its SHA-256
digest in hex (what a server checks against). A server needs only the digests, so a pod that
serves calls does not hold the tokens of the roles that call it; where a digest file is
absent, the digest of the token file is used.

`ACCESS` is the one table of which roles may call which method. A service calling another
uses its own role (the environment calls search as `environment`, the reward service asks
the environment for a diff as `reward`); health checking and reflection stay open so probes
and tools work without a secret. A method the table does not name is `operator`-only.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc import aio

from etude.common.grpc_interceptors import handler_factory, split_method
from etude.common.settings import AuthSettings

log = logging.getLogger(__name__)

ROLES = ("rollout", "trainer", "gateway", "operator", "environment", "reward")
"""Every role, in the order a client that holds several prefers them (least power first
among those a method allows)."""

_API = "etude.api.v1"
_GENERATE = frozenset({"rollout", "trainer", "gateway", "operator"})
_SESSIONS = frozenset({"rollout", "operator"})

ACCESS: Mapping[str, Mapping[str, frozenset[str]]] = {
    f"{_API}.InferenceService": {
        "Generate": _GENERATE,
        "GetPolicy": _GENERATE,
        "GetLoad": _GENERATE,
        # Only the trainer publishes weights: anyone else could zero the policy or move
        # its version so far that the trainer's next update is refused.
        "UpdateWeights": frozenset({"trainer"}),
    },
    f"{_API}.EnvironmentService": {
        "CreateSession": _SESSIONS,
        "Execute": _SESSIONS,
        "Fork": _SESSIONS,
        "Diff": _SESSIONS | {"reward"},
        "CloseSession": _SESSIONS,
        "ListTools": _SESSIONS,
    },
    f"{_API}.RewardService": {"Score": frozenset({"rollout", "trainer", "operator"})},
    f"{_API}.SearchService": dict.fromkeys(
        ("IndexWorkspace", "UpdateFiles", "Query", "DropWorkspace"),
        frozenset({"environment", "operator"}),
    ),
}

OPEN_SERVICES = frozenset(
    {
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "grpc.reflection.v1.ServerReflection",
    }
)

OPERATOR_ONLY = frozenset({"operator"})


def allowed_roles(service: str, method: str) -> frozenset[str] | None:
    """The roles that may call `service/method`; None when the call needs no credential."""
    if service in OPEN_SERVICES:
        return None
    return ACCESS.get(service, {}).get(method, OPERATOR_ONLY)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def fingerprint(token: str) -> str:
    """A short, non-reversible name of a token for logs and `etude status`."""
    return "sha256:" + digest(token)[:12]


def _read(path: Path) -> str | None:
    try:
        text = path.read_text().strip()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    return text or None


def read_tokens(tokens_dir: Path | None, roles: tuple[str, ...] | None = None) -> dict[str, str]:
    """The tokens this process presents: `<dir>/<role>` for `roles` (all roles if None)."""
    if tokens_dir is None:
        return {}
    wanted = ROLES if roles is None else roles
    return {role: t for role in wanted if (t := _read(tokens_dir / role)) is not None}


def read_digests(tokens_dir: Path | None) -> dict[str, str]:
    """What a server checks against: `<role>.sha256`, else the digest of `<role>`."""
    if tokens_dir is None:
        return {}
    digests = {}
    for role in ROLES:
        known = _read(tokens_dir / f"{role}.sha256")
        token = _read(tokens_dir / role) if known is None else None
        if known is not None or token is not None:
            digests[role] = (known or digest(token or "")).lower()
    return digests


def write_tokens(tokens_dir: Path, roles: tuple[str, ...] = ROLES) -> dict[str, str]:
    """Make sure `tokens_dir` holds a token (mode 0600) and its digest for each role; a
    token already there is kept, so processes holding it keep working. Returns them."""
    tokens_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    tokens_dir.chmod(0o700)
    tokens = {}
    for role in roles:
        path = tokens_dir / role
        token = _read(path)
        if token is None:
            token = secrets.token_urlsafe(32)
            # Created 0600 from the start, never readable by others even for an instant.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(token + "\n")
        (tokens_dir / f"{role}.sha256").write_text(digest(token) + "\n")
        tokens[role] = token
    return tokens


def bearer_header(settings: AuthSettings, role: str) -> dict[str, str]:
    """`{"Authorization": "Bearer <token>"}` for an HTTP call as `role`; {} without it."""
    token = read_tokens(settings.tokens_dir, (role,)).get(role)
    return {"Authorization": f"Bearer {token}"} if token else {}


class AuthConfigError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class Verifier:
    """Which role, if any, a presented token proves."""

    digests: Mapping[str, str]
    required: bool = True

    @classmethod
    def from_settings(cls, settings: AuthSettings) -> Verifier:
        if not settings.required:
            log.warning(
                "AUTHENTICATION IS OFF (ETUDE_AUTH__REQUIRED=false): anyone who reaches this "
                "service's port can drive it. Never run like this outside a development box."
            )
            return cls({}, required=False)
        digests = read_digests(settings.tokens_dir)
        if not digests:
            raise AuthConfigError(
                "no credentials to check callers against: set ETUDE_AUTH__TOKENS_DIR to a "
                "directory of <role> or <role>.sha256 files (`etude up` makes one)"
            )
        return cls(digests)

    def role_of(self, token: str | None) -> str | None:
        if not token:
            return None
        presented = digest(token)
        role = None
        # Every digest is compared, in constant time, so timing tells nothing about which.
        for candidate, known in self.digests.items():
            if hmac.compare_digest(presented, known):
                role = candidate
        return role

    def check(self, token: str | None, allowed: frozenset[str] | None) -> grpc.StatusCode | None:
        """None when the call may proceed, else the code to refuse it with."""
        if allowed is None or not self.required:
            return None
        role = self.role_of(token)
        if role is None:
            return grpc.StatusCode.UNAUTHENTICATED
        if role not in allowed:
            return grpc.StatusCode.PERMISSION_DENIED
        return None


def bearer(value: str | None) -> str | None:
    """The token of an `authorization: Bearer <token>` value."""
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


# -- server ------------------------------------------------------------------------------


def metrics_authorizer(settings: AuthSettings) -> Callable[[str | None], bool] | None:
    """With `metrics_require_token`, a check of /metrics requests' `Authorization` header
    that passes only the operator; None (open) otherwise."""
    if not settings.metrics_require_token:
        return None
    verifier = Verifier.from_settings(settings)
    return lambda header: verifier.check(bearer(header), OPERATOR_ONLY) is None


def _refusal(code: grpc.StatusCode, detail: str, handler: grpc.RpcMethodHandler):
    """A handler of the same shape as `handler` that refuses the call without reading it
    (request bytes are not even decoded for a caller who has not proved a role)."""

    async def refuse(request_or_iterator, context):
        await context.abort(code, detail)

    return handler_factory(handler)(refuse)


class AuthInterceptor(aio.ServerInterceptor):
    """Refuses calls without a token (UNAUTHENTICATED) or of a role the method does not
    allow (PERMISSION_DENIED), before the servicer sees them."""

    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        service, method = split_method(handler_call_details.method)
        metadata = dict(handler_call_details.invocation_metadata or ())
        code = self.verifier.check(
            bearer(metadata.get("authorization")), allowed_roles(service, method)
        )
        if code is None:
            return handler
        detail = (
            "a credential is required: authorization: Bearer <role token>"
            if code == grpc.StatusCode.UNAUTHENTICATED
            else f"{method} is not allowed for this role"
        )
        return _refusal(code, detail, handler)


# -- client ------------------------------------------------------------------------------


def choose_token(tokens: Mapping[str, str], full_method: str) -> str | None:
    """The token a client presents for a method: of the first role it holds that the
    method allows; else any it holds (the server then says PERMISSION_DENIED, which names
    the problem better than UNAUTHENTICATED); none for open services."""
    service, method = split_method(full_method)
    allowed = allowed_roles(service, method)
    if allowed is None or not tokens:
        return None
    for role in ROLES:
        if role in tokens and role in allowed:
            return tokens[role]
    return next(iter(tokens.values()))


class _Credentials:
    """Adds the bearer token to a call's metadata (one class for the four call shapes)."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self.tokens = dict(tokens)

    def _details(self, details: aio.ClientCallDetails) -> aio.ClientCallDetails:
        method = details.method
        token = choose_token(self.tokens, method.decode() if isinstance(method, bytes) else method)
        if token is None:
            return details
        metadata = aio.Metadata(*(details.metadata or ()))
        metadata.add("authorization", f"Bearer {token}")
        return aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )


class _UnaryUnary(_Credentials, aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, client_call_details, request):
        return await continuation(self._details(client_call_details), request)


class _UnaryStream(_Credentials, aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, client_call_details, request):
        return await continuation(self._details(client_call_details), request)


class _StreamUnary(_Credentials, aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return await continuation(self._details(client_call_details), request_iterator)


class _StreamStream(_Credentials, aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return await continuation(self._details(client_call_details), request_iterator)


def client_interceptors(tokens: Mapping[str, str]) -> list[aio.ClientInterceptor]:
    """Interceptors that present `tokens` (role → token) on every call of a channel."""
    if not tokens:
        return []
    return [cls(tokens) for cls in (_UnaryUnary, _UnaryStream, _StreamUnary, _StreamStream)]


# -- TLS ---------------------------------------------------------------------------------


def tls_files(settings: AuthSettings) -> tuple[bytes, bytes, bytes] | None:
    """(certificate chain, private key, CA bundle) when mTLS is configured, else None."""
    paths = (settings.tls_cert_file, settings.tls_key_file, settings.tls_ca_file)
    if all(p is None for p in paths):
        return None
    if any(p is None for p in paths):
        raise AuthConfigError(
            "mTLS needs all three of ETUDE_AUTH__TLS_CERT_FILE, _TLS_KEY_FILE and _TLS_CA_FILE"
        )
    return tuple(Path(p).read_bytes() for p in paths)  # type: ignore[return-value]


def server_credentials(settings: AuthSettings) -> grpc.ServerCredentials | None:
    files = tls_files(settings)
    if files is None:
        return None
    cert, key, ca = files
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=True
    )


def channel_credentials(settings: AuthSettings) -> grpc.ChannelCredentials | None:
    files = tls_files(settings)
    if files is None:
        return None
    cert, key, ca = files
    return grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=key, certificate_chain=cert
    )

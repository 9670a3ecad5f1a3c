"""Talking to a registry safely: its logins (credentials the standard way, sent only to the registry, never shown)
and its answers read within a bound, so a hostile registry costs megabytes, not memory."""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from compiler.core import child
from compiler.core.errors import EnvironmentProblem
from compiler.core.jsonio import UnreadableJson, parse_json

MAX_MANIFEST_BYTES = 4 << 20
"""What registries accept for a manifest (Distribution's limit); a bigger answer is not one of ours. Every answer
but a blob's (a manifest, a page of tags or repositories, a token, an error) is read up to this and refused past
it, never read whole."""
TIMEOUT = (5, 60)
"""Seconds to connect and between bytes: an unreachable registry fails fast, a slow upload does not (each within
the store's deadline, :mod:`compiler.stores.deadline`)."""
CHUNK = 1 << 20
HELPER_SECONDS = 30.0
"""A credential helper answers from a keychain in well under a second."""


def timeouts() -> tuple[float, float]:
    from compiler.stores.deadline import socket_timeouts

    return socket_timeouts(*TIMEOUT)


def read_bounded(response, what: str) -> None:
    """Read a streamed answer's body, refusing it past :data:`MAX_MANIFEST_BYTES` (what no answer of a registry
    but a blob has), so ``response.content`` is then that body: a hostile endless answer costs 4 MiB, not all."""
    if response.raw is None:  # built with its body already (as a test's injected answer is)
        return
    parts, size = [], 0
    try:
        for data in response.iter_content(CHUNK):
            size += len(data)
            if size > MAX_MANIFEST_BYTES:
                response.close()
                raise EnvironmentProblem(
                    f"{what} is longer than {MAX_MANIFEST_BYTES >> 20} MiB, which no answer but "
                    "a blob is; the registry is not one this tool can use"
                )
            parts.append(data)
    finally:
        response.close()
    response._content = b"".join(parts)  # what requests' own .content would hold, read within the bound


def answer_json(body: bytes) -> Any:
    """A registry's JSON answer, or None for what is not JSON we read (too large, nested too deep)."""
    try:
        return parse_json(body, MAX_MANIFEST_BYTES)
    except UnreadableJson:
        return None


class Authorizer:
    """Registry credentials the standard way, sent only to the registry and never shown: ``COMPILE_REGISTRY_USERNAME``
    and ``COMPILE_REGISTRY_PASSWORD``, else the Docker config (``$REGISTRY_AUTH_FILE``, ``$DOCKER_CONFIG/config.json``,
    ``~/.docker/config.json``: ``auths``, ``credHelpers``, ``credsStore``). A 401's challenge decides the scheme:
    Basic, or a Bearer token fetched from the challenge's realm for its scope."""

    def __init__(self, uri: str, host: str, session: Any) -> None:
        self.uri, self.host, self.session = uri, host, session
        self._basic: str | None = None
        self._tokens: dict[str, str] = {}
        self._credentials: tuple[str, str] | bool | None = False  # False: not looked up yet

    def header(self, scope: str) -> str | None:
        return self._tokens.get(scope) or self._basic

    def challenge(self, response, scope: str) -> None:
        header = response.headers.get("WWW-Authenticate", "")
        scheme = header.split(" ", 1)[0].lower()
        params = dict(re.findall(r'(\w+)="([^"]*)"', header))
        credentials = self.credentials()
        if scheme == "basic":
            if credentials is None:
                raise self._needs_login()
            self._basic = "Basic " + base64.b64encode(f"{credentials[0]}:{credentials[1]}".encode()).decode()
        elif scheme == "bearer" and params.get("realm"):
            self._tokens[scope] = "Bearer " + self._token(params, credentials)
        else:
            raise self._needs_login()

    def _needs_login(self) -> EnvironmentProblem:
        return EnvironmentProblem(
            f"store {self.uri}: the registry {self.host} asks for credentials; "
            f"log in with `docker login {self.host}` (or set DOCKER_CONFIG)"
        )

    def _token(self, params: dict[str, str], credentials: tuple[str, str] | None) -> str:
        import requests

        realm = params["realm"]
        if credentials is not None and urlsplit(realm).scheme != "https" and urlsplit(realm).netloc != self.host:
            raise EnvironmentProblem(
                f"store {self.uri}: the registry sends logins to {urlsplit(realm).netloc} "
                "over plain HTTP; refusing to send credentials there"
            )
        query = {key: params[key] for key in ("service", "scope") if key in params}
        try:
            if credentials is not None and credentials[0] == "<token>":  # an identity (refresh) token
                grant = {"grant_type": "refresh_token", "client_id": "trt-compile", "refresh_token": credentials[1]}
                answer = self.session.post(realm, data={**query, **grant}, timeout=timeouts(), stream=True)
            else:
                answer = self.session.get(realm, params=query, auth=credentials, timeout=timeouts(), stream=True)
            read_bounded(answer, f"store {self.uri}: the token service's answer")
        except requests.exceptions.RequestException as exc:
            raise EnvironmentProblem(
                f"store {self.uri}: cannot reach the registry's token service "
                f"{urlsplit(realm).netloc} ({type(exc).__name__})"
            ) from None
        if answer.status_code in (401, 403):
            raise EnvironmentProblem(
                f"store {self.uri}: the registry {self.host} refused the credentials; log in again with `docker login`"
            )
        found = answer_json(answer.content)
        token = (found.get("token") or found.get("access_token")) if isinstance(found, dict) else None
        if answer.status_code != 200 or not isinstance(token, str):
            raise EnvironmentProblem(
                f"store {self.uri}: the registry's token service answered {answer.status_code} without a token"
            )
        return token

    def credentials(self) -> tuple[str, str] | None:
        if self._credentials is False:
            self._credentials = find_credentials(self.host)
        return self._credentials  # type: ignore[return-value]


def find_credentials(host: str) -> tuple[str, str] | None:
    user, password = os.environ.get("COMPILE_REGISTRY_USERNAME"), os.environ.get("COMPILE_REGISTRY_PASSWORD")
    if user and password:
        return user, password
    for path in _config_files():
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(config, dict):
            continue
        helpers, auths = config.get("credHelpers"), config.get("auths")
        helper = (helpers.get(host) if isinstance(helpers, dict) else None) or config.get("credsStore")
        for key, entry in auths.items() if isinstance(auths, dict) else ():
            if _host_of(key) == host and isinstance(entry, dict):
                if entry.get("identitytoken"):
                    return "<token>", str(entry["identitytoken"])
                if entry.get("auth"):
                    try:
                        user, _, password = base64.b64decode(str(entry["auth"])).decode().partition(":")
                    except ValueError:
                        raise EnvironmentProblem(
                            f"{path}: the auths entry for {host} is not base64 of user:password; log in again"
                        ) from None
                    return user, password
        if isinstance(helper, str) and helper:
            return _from_helper(helper, host)
    return None


def _config_files() -> list[Path]:
    files = [Path(os.environ["REGISTRY_AUTH_FILE"])] if os.environ.get("REGISTRY_AUTH_FILE") else []
    folder = os.environ.get("DOCKER_CONFIG")
    files.append(Path(folder) / "config.json" if folder else Path.home() / ".docker" / "config.json")
    return files


def _host_of(key: str) -> str:
    try:
        return urlsplit(key if "://" in key else f"//{key}").netloc
    except ValueError:  # not a host at all ("[", a broken IPv6 literal): an entry for no registry
        return ""


def _from_helper(helper: str, host: str) -> tuple[str, str] | None:
    """Ask Docker's credential helper ``docker-credential-<helper>`` (it keeps secrets out of config.json)."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", helper):
        raise EnvironmentProblem(f"Docker config: credential helper {helper!r} is not a helper name")
    try:
        done = child.run([f"docker-credential-{helper}", "get"], HELPER_SECONDS, input_text=host)
    except OSError as exc:
        raise EnvironmentProblem(
            f"Docker config: cannot run docker-credential-{helper} for {host} "
            f"({type(exc).__name__}); install it or log in again"
        ) from None
    if done.timed_out:
        raise EnvironmentProblem(
            f"Docker config: docker-credential-{helper} gave no answer for {host} in {HELPER_SECONDS:g} s; "
            "install it again or log in again"
        )
    if done.returncode != 0:
        return None  # "credentials not found in native keychain"
    try:
        answer = json.loads(done.stdout)
        return str(answer["Username"]), str(answer["Secret"])
    except (ValueError, KeyError, TypeError):
        raise EnvironmentProblem(
            f"Docker config: docker-credential-{helper} answered something other than credentials"
        ) from None

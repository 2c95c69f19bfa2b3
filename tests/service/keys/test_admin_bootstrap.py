"""The admin key from REFLEXA_ADMIN_KEY: replicas starting together (uvicorn
--workers N, several containers) all register it without failing their start."""

from __future__ import annotations

import threading

from service.keys.service import KeyService
from store.database import Database


def test_replicas_starting_together_register_the_env_key_once(database_url: str) -> None:
    services = [(db := Database(database_url), KeyService(db)) for _ in range(8)]
    errors: list[BaseException] = []

    def start(keys: KeyService, barrier: threading.Barrier, secret: str) -> None:
        barrier.wait()
        try:
            keys.bootstrap_admin(secret)
        except BaseException as exc:  # noqa: BLE001 - the assertion below shows it
            errors.append(exc)

    try:
        # A race is timing-dependent: several rounds (a new key each time, which
        # also races the replacement of the old one) make losing one likely.
        for round_ in range(4):
            secret = f"rfx_admin_env_key_{round_}_0123456789abcdefghij"
            barrier = threading.Barrier(len(services))
            threads = [threading.Thread(target=start, args=(keys, barrier, secret)) for _, keys in services]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert errors == []
            assert services[0][1].authenticate(f"Bearer {secret}").role == "admin"
    finally:
        for db, _ in services:
            db.dispose()

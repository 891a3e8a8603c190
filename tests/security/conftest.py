"""The adversarial suite: every attack a policy or a caller on the network could try, each
performed through a public API, asserting it fails and the service still works after.

Fixtures shared with the service tests are re-exported here.
"""

from tests.environment.conftest import manager, repo  # noqa: F401

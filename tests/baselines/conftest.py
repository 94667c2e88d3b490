"""The baselines' test-only tasks (``baseline_envs.py``, registered under ``TestBaselines/``)
are imported here so that every test of this folder finds them registered. Test modules
import their names from ``baseline_envs``: a ``from conftest import`` would take whichever
folder's conftest a test process imported first."""

import baseline_envs  # noqa: F401  (registers the TestBaselines/ ids)

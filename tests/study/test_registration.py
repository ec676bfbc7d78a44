"""The pre-registration is appended to, never edited: the file as each amendment (and each outcome) registered it is
where today's file begins. Needs the repository's history (skipped without it: a wheel, a shallow clone)."""

from __future__ import annotations

import subprocess

import pytest

from tests.launching import ROOT

REGISTRATION = "results/preregistration.md"
# The commits that appended to it: Amendment 1 and its correction, Amendment 2, Amendment 1's outcome, Amendment 4.
# Amendment 3's own two commits came after two commands above were edited in place (Amendment 4's errata restore
# them), so they are not here.
REGISTERED_AT = ("bff069d", "9256172", "ae879b9", "ae63ffe", "ffdd6f3")


def registered_text(commit: str) -> str:
    found = subprocess.run(["git", "show", f"{commit}:{REGISTRATION}"], cwd=ROOT, capture_output=True, text=True)
    if found.returncode != 0:
        pytest.skip(f"the repository's history is not here ({found.stderr.strip()[:80]})")
    return found.stdout


@pytest.mark.parametrize("commit", REGISTERED_AT)
def test_the_registration_as_each_amendment_registered_it_begins_todays(commit):
    today = (ROOT / REGISTRATION).read_text()
    assert today.startswith(registered_text(commit)), f"{REGISTRATION} was edited above what {commit} registered"

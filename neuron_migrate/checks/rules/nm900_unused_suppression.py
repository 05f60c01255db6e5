"""NM900: suppression comments that suppress nothing."""

from __future__ import annotations

from neuron_migrate.checks.rules.base import Invalid, Rule


class UnusedSuppression(Rule):
    """Flags `# noqa: NMxxx` and `# neuron-migrate: ignore[...]` comments that suppress nothing.

    ## What it does
    Reports suppressions of this tool's codes when no finding of that code starts or ends on
    the line, and codes that do not exist. Blanket `# noqa` comments are left alone (another
    linter may need them); a blanket `# neuron-migrate: ignore` that suppresses nothing is
    reported.

    ## Why
    Stale suppressions hide the next real finding on the line, and they mislead readers about
    what the line does.

    ## Example
    ```python
    x = torch.where(m, a, b)  # noqa: NM106
    ```

    ## Use instead
    ```python
    x = torch.where(m, a, b)
    ```

    ## Fix safety
    Safe: only the unused codes are removed; other tools' codes in the same `noqa` stay.
    """

    code = "NM900"
    name = "unused-suppression"
    summary = "a suppression comment that suppresses nothing"
    VALID = ("import torch\n\ndef forward(x):\n    return torch.nonzero(x)  # noqa: NM101\n",)
    INVALID = (
        Invalid(
            "import torch\n\nx = torch.where(m, a, b)  # noqa: NM106\n",
            fixed="import torch\n\nx = torch.where(m, a, b)\n",
        ),
        Invalid(
            "import torch\n\ny = 1  # noqa: E501, NM101\n",
            fixed="import torch\n\ny = 1  # noqa: E501\n",
        ),
        Invalid(
            "y = 1  # neuron-migrate: ignore[NM999]\n",
            line=1,
            message="unknown rule code NM999",
            fixed="y = 1\n",
        ),
    )

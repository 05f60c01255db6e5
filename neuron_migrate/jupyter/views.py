"""Widgets that are also static outputs.

A widget shows nothing once its kernel is gone: in a saved notebook reopened, in papermill's
output, on GitHub. So the apps put a static HTML view of what they show (verdict, diff, table,
curves) in their output next to the widget, for every reader that cannot show the widget: nbconvert
and GitHub use it where the notebook carries no widget state, and neuron-migrate's JupyterLab
piece shows it where the widget's model is gone. The output is written when the cell runs; as the
widget changes later, the piece puts the latest view into the notebook it saves, or at once for a
result (a validation's verdict, or its clearing when a new run starts).
"""

from __future__ import annotations

from typing import Any

from neuron_migrate.jupyter import bridge, render

STATIC_MARK = "nm-static"  # the piece shows a widget's text/html in place of it only if marked so


class StaticView:
    """Mixed into an ipywidgets box: its output carries `static_html()` as text/html."""

    # A view shown inside another's box: the other's output carries it, and publishes for it.
    owner: StaticView | None = None

    def static_html(self) -> str:
        raise NotImplementedError

    def static_bundle(self) -> dict[str, str]:
        body = f'<div class="{STATIC_MARK}">{self.static_html()}</div>'
        return {"text/html": render.output(body), "text/plain": repr(self)}

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle: dict[str, Any] = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]
        bundle.update(self.static_bundle())
        return bundle

    def publish(self, now: bool = False) -> None:
        """Tell the open tab what the widget shows now, for the notebook it saves next; with
        `now`, the tab puts it into the notebook at once (a result, rather than a view of it)."""
        if self.owner is not None:
            self.owner.publish(now)
            return
        tab = bridge.current()
        model_id = getattr(self, "model_id", None)
        if tab is not None and model_id:
            tab.static_view(model_id, self.static_bundle(), now)

"""A night's report, written beside its ledger and archived with its results.

`$LIFECYCLE_HOME/nights/<night>/report.html` and `report.json` (the JSON `lifecycle night
--json` prints, format `lifecycle-night/1`), written again whenever the night runs again. At
the archive location each writing is its own pair of objects under
`nights/<night>/<UTC time>-<6 hex>/`, created only if absent: the archive is append-only,
and the newest revision of a night's report is the last one listed.
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from pathlib import Path

from lifecycle.archive.store import BlobStore
from lifecycle.home import Home, write_atomic
from lifecycle.night.html import render_html
from lifecycle.night.view import NightView, ReportPlaces

FORMAT = "lifecycle-night/1"


def report_json(view: NightView) -> dict[str, object]:
    """The report as JSON data, its format first."""
    return {"format": FORMAT, **view.model_dump(mode="json")}


def publish(view: NightView, home: Home, store: BlobStore | None) -> NightView:
    """Write the report's two files (and archive them when there is an archive); the view with
    where they are."""
    directory = home.night_dir(view.id)
    directory.mkdir(parents=True, exist_ok=True)
    revision = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"
    html_key = store.location.key("nights", view.id, revision, "report.html") if store else None
    json_key = store.location.key("nights", view.id, revision, "report.json") if store else None
    places = ReportPlaces(
        html_file=str(directory / "report.html"),
        json_file=str(directory / "report.json"),
        archived_html=store.url(html_key) if store and html_key else None,
        archived_json=store.url(json_key) if store and json_key else None,
    )
    view = view.model_copy(update={"report": places})
    html = render_html(view, view.archive).encode()
    document = (json.dumps(report_json(view), indent=1) + "\n").encode()
    write_atomic(Path(places.html_file), html)
    write_atomic(Path(places.json_file), document)
    if store is not None and html_key and json_key:
        store.put_document(json_key, document, only_new=True)
        store.put_document(html_key, html, content_type="text/html; charset=utf-8", only_new=True)
    return view

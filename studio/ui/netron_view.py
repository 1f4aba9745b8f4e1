"""Netron panel: the current model (or its ONNX export) in Netron, served on localhost.

``netron.start(path, address=("localhost", 0), browse=False)`` serves the file; a
QWebEngineView shows it. Nothing leaves the machine:

- Netron's browser host asks for cookie consent unless a ``consent`` cookie exists
  (netron/browser.js ``consent()``); before that it looks the country up on
  ipinfo.io. A script injected at document creation sets that cookie, so the
  consent page never shows and the lookup never runs.
- Netron served from Python counts as "packaged" and starts Google Analytics
  (``base.Telemetry``, ``navigator.sendBeacon`` to analytics.google.com). A request
  interceptor on a private profile blocks every request that is not to the local
  server, and the injected script turns ``sendBeacon`` into a no-op.

Without QtWebEngine the panel offers "Open in browser" (the same local URL).
Torch models without an ONNX file get "Export to ONNX for Netron" (a worker job).
"""

from __future__ import annotations

import html
import logging
import webbrowser
from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QApplication, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from accel.models.runtime import get_runtime, kinds
from studio.ui.availability import set_available
from studio.ui.slots import on_click

log = logging.getLogger(__name__)

# Files Netron reads directly (besides ONNX); other torch sources need an export.
NETRON_SUFFIXES = (".onnx", ".xml", ".pt", ".pth", ".ts", ".pt2", ".tflite", ".pb")

# Runs before any page script: consent given (no dialog, no ipinfo lookup), no beacons.
NO_TELEMETRY_JS = """
(function () {
  var expires = new Date(Date.now() + 3650 * 24 * 3600 * 1000).toUTCString();
  document.cookie = "consent=" + Date.now() + ";path=/;expires=" + expires;
  try {
    Object.defineProperty(navigator, "sendBeacon", { value: function () { return true; } });
  } catch (e) {}
})();
"""

try:  # QtWebEngine is an optional add-on
    from PySide6.QtWebEngineCore import (
        QWebEnginePage,
        QWebEngineProfile,
        QWebEngineScript,
        QWebEngineUrlRequestInterceptor,
    )
    from PySide6.QtWebEngineWidgets import QWebEngineView

    HAVE_WEBENGINE = True
except ImportError:  # pragma: no cover - depends on the installation
    HAVE_WEBENGINE = False


def is_local_url(url: str) -> bool:
    q = QUrl(url)
    if q.scheme() in ("data", "blob", "about", "qrc", "chrome", "devtools"):
        return True
    return q.host() in ("localhost", "127.0.0.1", "::1", "[::1]")


if HAVE_WEBENGINE:

    class LocalOnlyInterceptor(QWebEngineUrlRequestInterceptor):
        """Blocks every request that is not to this machine (telemetry, lookups, fonts)."""

        def __init__(self, parent=None) -> None:
            super().__init__(parent)
            self.blocked: list[str] = []

        def interceptRequest(self, info) -> None:  # noqa: N802
            url = info.requestUrl().toString()
            if not is_local_url(url):
                self.blocked.append(url)
                info.block(True)


def netron_file_for(info: dict, source: str | None) -> str | None:
    """The file Netron can show for a model: its ONNX file, an ONNX export, or the
    source file itself when Netron reads that format."""
    for key in ("netron_file", "onnx_path", "onnx_export"):
        p = info.get(key)
        if p and Path(p).exists():
            return str(p)
    if source:
        path = source.split("::", 1)[0]
        if path.lower().endswith(NETRON_SUFFIXES) and Path(path).exists():
            return path
    return None


class NetronView(QWidget):
    """The Netron panel; the server starts only when the panel is shown."""

    def __init__(self, state, services=None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("NetronView")
        self.state = state
        self.services = services
        self.address: tuple[str, int] | None = None
        self.served: str | None = None
        self.web = None
        self._profile = None
        self.interceptor = None

        self.label = QLabel("No model open.")
        self.label.setWordWrap(True)
        self.export_btn = QPushButton("Export to ONNX for Netron")
        on_click(self.export_btn.clicked, self.export)
        self.browser_btn = QPushButton("Open in browser")
        on_click(self.browser_btn.clicked, self.open_in_browser)
        set_available(self.browser_btn, "open a model first", "open Netron in your browser")
        bar = QHBoxLayout()
        bar.addWidget(self.label, 1)
        bar.addWidget(self.export_btn)
        bar.addWidget(self.browser_btn)
        self.body = QVBoxLayout()
        self.placeholder = QLabel("")
        self.placeholder.setWordWrap(True)
        self.body.addWidget(self.placeholder, 1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(bar)
        lay.addLayout(self.body, 1)

        state.modelChanged.connect(self.refresh)
        if services is not None:
            services.onnxExported.connect(lambda _p: self.refresh())
            services.jobFailed.connect(self._on_failed)
        self.refresh()

    # -- what to show ---------------------------------------------------------------------
    def target_file(self) -> str | None:
        info = dict(self.state.model_info or {})
        if self.services is not None and self.state.model_source and "onnx_export" not in info:
            info["onnx_export"] = str(self.services.export_path())  # an earlier export
        return netron_file_for(info, self.state.model_source)

    def refresh(self) -> None:
        info = self.state.model_info or {}
        target = self.target_file()
        # The model kind's runtime says whether an ONNX export can show it (torch models).
        kind = info.get("kind")
        exportable = kind in kinds() and "export_onnx" in get_runtime(kind).capabilities
        self.export_btn.setVisible(exportable)
        if not self.state.model_source:
            self.label.setText("No model open.")
            set_available(self.export_btn, "open a torch model first", "")
            return
        if target is None:
            self.label.setText(
                f"<b>{html.escape(self.state.model_source)}</b> has no file Netron can read. "
                "Export it to ONNX to see it here."
            )
            self.placeholder.setText("")
        else:
            self.label.setText(f"Netron: <b>{html.escape(target)}</b>")
        can_export = exportable and self.services is not None
        exported = can_export and target == str(self.services.export_path())
        self.export_btn.setText("Export again" if exported else "Export to ONNX for Netron")
        set_available(
            self.export_btn,
            None
            if can_export
            else f"only torch models are exported (this one is {info.get('runtime', 'a runtime file')})",
            "Export the model to ONNX in a worker and show it here",
        )
        if target is not None and self.isVisible():
            self.show_file(target)

    def showEvent(self, event) -> None:  # noqa: N802
        super().showEvent(event)
        target = self.target_file()
        if target is not None and target != self.served:
            self.show_file(target)

    # -- serving --------------------------------------------------------------------------
    def url(self) -> str | None:
        if self.address is None:
            return None
        return f"http://{self.address[0]}:{self.address[1]}/"

    def start_server(self, path: str) -> str:
        import netron

        self.stop_server()
        self.address = netron.start(path, address=("localhost", 0), browse=False)
        self.served = path
        set_available(self.browser_btn, None, "open Netron in your browser")
        return self.url() or ""

    def stop_server(self) -> None:
        if self.address is not None:
            try:
                import netron

                netron.stop(self.address)
            except Exception:
                log.debug("netron stop failed", exc_info=True)
            self.address = None

    def show_file(self, path: str) -> None:
        try:
            url = self.start_server(path)
        except Exception as exc:
            self.placeholder.setText(f"Netron could not serve {html.escape(path)}: {exc}")
            return
        if not HAVE_WEBENGINE:
            self.placeholder.setText(
                f"Qt WebEngine is not installed: use <b>Open in browser</b> ({url})."
            )
            return
        self._ensure_web()
        self.web.load(QUrl(url))

    def _ensure_web(self) -> None:
        if self.web is not None:
            return
        from studio.webengine import webengine_sandbox_env

        # As root Chromium aborts the process without --no-sandbox: add it before the
        # engine starts (also when the QApplication was not made by make_qapp).
        warning = webengine_sandbox_env()
        if warning:
            self.state.status.emit(warning)
        # A private (off-the-record) profile: no cookies or cache on disk, and our
        # interceptor and script apply to Netron only.
        # Parented to the application: the profile must outlive the page (Qt warns otherwise).
        self._profile = QWebEngineProfile(QApplication.instance())
        self.interceptor = LocalOnlyInterceptor(self._profile)
        self._profile.setUrlRequestInterceptor(self.interceptor)
        script = QWebEngineScript()
        script.setName("accel-studio-no-telemetry")
        script.setSourceCode(NO_TELEMETRY_JS)
        script.setInjectionPoint(QWebEngineScript.InjectionPoint.DocumentCreation)
        script.setWorldId(QWebEngineScript.ScriptWorldId.MainWorld)
        script.setRunsOnSubFrames(True)
        self._profile.scripts().insert(script)
        self.web = QWebEngineView(self)
        self.web.setPage(QWebEnginePage(self._profile, self.web))
        self.placeholder.hide()
        self.body.addWidget(self.web, 1)

    def open_in_browser(self) -> None:
        url = self.url()
        if url:
            webbrowser.open(url)

    def export(self) -> None:
        if self.services is not None and self.services.export_onnx():
            set_available(self.export_btn, "exporting to ONNX in a worker…", "")
            self.label.setText("Exporting to ONNX in a worker…")

    def _on_failed(self, kind: str, message: str) -> None:
        if kind == "export":
            set_available(self.export_btn, None, "Export the model to ONNX again")
            self.label.setText(
                f"<span style='color:#e03131'>ONNX export failed:</span> {html.escape(message)}"
            )

    def release(self) -> None:
        """Stop the server and delete the web view now: its page must go before the
        profile it uses (Qt warns at exit otherwise)."""
        self.stop_server()
        if self.web is not None:
            import shiboken6

            web, self.web = self.web, None
            self.body.removeWidget(web)
            shiboken6.delete(web)
            self.placeholder.show()
            self.served = None

    def closeEvent(self, event) -> None:  # noqa: N802
        self.release()
        super().closeEvent(event)

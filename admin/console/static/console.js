// The pgoutbox console's only script: it refreshes the overview. Every
// 5 s it fetches the overview's fragment (the #overview element, rendered
// by the server) and swaps it in. Nothing else runs: no inline script,
// no eval, and the fragment is parsed as an inert document (its scripts,
// if any, never run) before its element is imported.
(function () {
  "use strict";
  var interval = 5000;

  function current() {
    return document.getElementById("overview");
  }

  function setState(text) {
    var el = document.getElementById("refresh-state");
    if (el) {
      el.textContent = text;
    }
  }

  function refresh() {
    var box = current();
    if (!box) {
      return;
    }
    if (document.hidden) {
      window.setTimeout(refresh, interval);
      return;
    }
    // Resolved against the origin, not the page's URL: a page opened as
    // http://user:pass@host/ has a base URL fetch refuses.
    var url = new URL(box.getAttribute("data-fragment"), window.location.origin);
    fetch(url, { credentials: "same-origin", cache: "no-store", headers: { "Accept": "text/html" } })
      .then(function (res) {
        if (!res.ok) {
          throw new Error("HTTP " + res.status);
        }
        return res.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var next = doc.getElementById("overview");
        var old = current();
        if (next && old) {
          old.replaceWith(document.importNode(next, true));
        }
      })
      .catch(function (err) {
        setState("Refresh failed (" + err.message + "); retrying.");
      })
      .finally(function () {
        window.setTimeout(refresh, interval);
      });
  }

  if (current()) {
    window.setTimeout(refresh, interval);
  }
})();

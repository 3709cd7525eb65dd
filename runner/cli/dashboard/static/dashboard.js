// chunkrunner dashboard: live refresh without reloading, and the actions' token.
// Every few seconds the page fetches its own live part (the same URL with
// ?fragment=1, HTML the server escaped) and swaps it in, keeping open tracebacks
// open. Nothing is fetched while the tab is hidden.
(function () {
  "use strict";
  const live = document.getElementById("live");
  const note = document.getElementById("refresh-state");
  const seconds = live ? Number(live.dataset.refreshSeconds) : 0;

  function say(text) {
    if (note) note.textContent = text;
  }

  async function refresh() {
    if (!document.hidden) {
      const url = new URL(window.location.href);
      url.searchParams.set("fragment", "1");
      url.hash = "";
      try {
        const reply = await fetch(url, { cache: "no-store", credentials: "same-origin" });
        if (reply.ok) {
          const opened = Array.from(live.querySelectorAll("details[open][id]"), (d) => d.id);
          live.innerHTML = await reply.text();
          for (const id of opened) {
            const details = document.getElementById(id);
            if (details) details.open = true;
          }
          say("");
        } else {
          say("Last refresh failed: HTTP " + reply.status + "; showing the page as it was.");
        }
      } catch (error) {
        say("Last refresh failed: the dashboard does not answer; showing the page as it was.");
      }
    }
    window.setTimeout(refresh, seconds * 1000);
  }

  if (live && seconds > 0) window.setTimeout(refresh, seconds * 1000);

  // The token is kept for this tab only (sessionStorage), never in a URL.
  const token = document.getElementById("token");
  if (token) {
    token.value = window.sessionStorage.getItem("runner-token") || "";
    token.addEventListener("input", () => window.sessionStorage.setItem("runner-token", token.value));
  }

  // A button that says data-confirm asks first (cancelling cannot be undone).
  document.addEventListener("submit", (event) => {
    const button = event.submitter;
    if (button && button.dataset.confirm && !window.confirm(button.dataset.confirm)) {
      event.preventDefault();
    }
  });
})();

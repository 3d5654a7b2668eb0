extension WebPage {
    /// The forms (add, speed limit) and the page's start; ends the script's function.
    static let scriptForms = #"""
  // MARK: forms

  function showLimit(options) {
    const limit = options && options["max-overall-download-limit"];
    $("limit-now").textContent = limit && limit !== "0" ? `now ${limit} bytes/s` : "now none";
  }

  async function add(event) {
    event.preventDefault();
    showError("add-error", null);
    const lines = $("add-urls").value.split("\n").map((line) => line.trim()).filter((line) => line.length > 0);
    const mirrors = $("add-mirrors").value.split("\n").map((line) => line.trim()).filter((line) => line.length > 0);
    const options = {};
    const checksum = $("add-checksum").value.trim();
    const out = $("add-out").value.trim();
    if ((checksum || out || mirrors.length > 0) && lines.length !== 1) {
      showError("add-error", "A checksum, a file name or mirrors apply to one download: give one line of URLs.");
      return;
    }
    if (checksum) options.checksum = checksum;
    if (out) options.out = out;
    const priority = parseInt($("add-priority").value, 10);
    if (priority) options.priority = String(priority);
    if ($("add-cd").checked) options["content-disposition"] = "true";
    if ($("add-paused").checked) options.pause = "true";
    try {
      for (const line of lines) {
        const uris = line.split(/\s+/).concat(lines.length === 1 ? mirrors : []);
        await call("aria2.addUri", uris, options);
      }
      $("add-urls").value = "";
      $("add-mirrors").value = "";
      $("add-checksum").value = "";
      $("add-out").value = "";
    } catch (error) {
      showError("add-error", error);
    }
    refreshSoon();
  }

  async function setLimit(event) {
    event.preventDefault();
    showError("action-error", null);
    const value = $("limit").value.trim() || "0";
    try {
      await call("aria2.changeGlobalOption", { "max-overall-download-limit": value });
      showLimit(await call("aria2.getGlobalOption"));
    } catch (error) {
      showError("action-error", error);
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("signin-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const value = $("secret").value;
      $("secret").value = "";
      if (!value) return;
      localStorage.setItem(storeKey, value);
      start();
    });
    $("signout").addEventListener("click", () => {
      localStorage.removeItem(storeKey);
      secret = null;
      showSignIn("");
    });
    $("add-form").addEventListener("submit", add);
    $("limit-form").addEventListener("submit", setLimit);
    $("purge").addEventListener("click", () => {
      call("aria2.purgeDownloadResult").then(refreshSoon, (error) => showError("action-error", error));
    });
    connect();
  });
})();
"""#
}

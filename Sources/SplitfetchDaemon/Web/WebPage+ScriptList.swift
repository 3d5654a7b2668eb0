extension WebPage {
    /// The list of downloads: loading it, drawing its rows, their controls, reordering.
    static let scriptList = #"""
  // MARK: the list

  function refreshSoon() {
    if (refreshTimer === null) refreshTimer = setTimeout(refresh, 100);
  }

  async function refresh() {
    refreshTimer = null;
    let active, waiting, stopped, stat;
    try {
      [active, waiting, stopped, stat] = await Promise.all([
        call("aria2.tellActive", keys), call("aria2.tellWaiting", 0, 10000, keys),
        call("aria2.tellStopped", 0, 1000, keys), call("aria2.getGlobalStat")]);
    } catch (error) {
      showError("action-error", error);
      return;
    }
    $("num-active").textContent = stat.numActive;
    $("num-waiting").textContent = stat.numWaiting;
    $("num-stopped").textContent = stat.numStopped;
    const unfinished = active.concat(waiting)
      .sort((a, b) => Number(a["splitfetch.position"]) - Number(b["splitfetch.position"]));
    unfinishedOrder = unfinished.map((d) => d.gid);
    draw(unfinished.concat(stopped.reverse()));
  }

  function nameOf(download) {
    const file = download.files && download.files[0];
    const path = file && file.path ? String(file.path) : "";
    const name = path.slice(path.lastIndexOf("/") + 1);
    if (name) return name;
    const uri = file && file.uris && file.uris[0] ? String(file.uris[0].uri) : "";
    return uri || download.gid;
  }

  function draw(downloads) {
    const list = $("downloads");
    // A box being typed in keeps its text and its focus across the redraw.
    const focused = document.activeElement;
    const editing = focused && focused.dataset && focused.dataset.field && list.contains(focused)
      ? { gid: focused.closest("li").dataset.gid, field: focused.dataset.field, value: focused.value } : null;
    const drawn = new Map();
    list.replaceChildren();
    for (const download of downloads) {
      const row = makeRow(download);
      drawn.set(download.gid, row);
      list.appendChild(row.node);
    }
    rows = drawn;
    $("empty").hidden = downloads.length > 0;
    const again = editing && drawn.get(editing.gid);
    const box = again && again.node.querySelector(`[data-field="${editing.field}"]`);
    if (box) {
      box.value = editing.value;
      box.focus();
    }
  }

  function makeRow(d) {
    const node = el("li", "download");
    node.dataset.gid = d.gid;
    node.dataset.status = d.status;
    const top = el("div", "top");
    const name = el("span", "name", nameOf(d));
    top.append(name, el("span", "state " + d.status, d.status === "error" ? "failed" : d.status));
    node.appendChild(top);
    const file = d.files && d.files[0];
    const uris = file && file.uris ? file.uris.map((u) => String(u.uri)) : [];
    if (uris.length > 0) {
      node.appendChild(el("div", "url", uris[0] + (uris.length > 1 ? `  (+${uris.length - 1} mirror${uris.length > 2 ? "s" : ""})` : "")));
    }
    const bar = el("div", "bar");
    const fill = el("div");
    bar.appendChild(fill);
    node.appendChild(bar);
    const figures = el("div", "figures");
    node.appendChild(figures);
    if (d.errorMessage) node.appendChild(el("div", "message", d.errorMessage));
    if (d["splitfetch.sha256"]) node.appendChild(el("div", "url", "SHA-256 " + d["splitfetch.sha256"]));
    const segmap = el("div", "segmap");
    node.appendChild(segmap);
    node.appendChild(controls(d));
    const row = { node, fill, figures, segmap, download: d };
    update(row, Number(d.completedLength), Number(d.totalLength), Number(d.downloadSpeed));
    if (d.status !== "complete" && d.status !== "error" && d.status !== "removed") makeDraggable(node, d.gid);
    return row;
  }

  function update(row, done, total, speed) {
    const d = row.download;
    const fraction = total > 0 ? Math.min(1, done / total) : (d.status === "complete" ? 1 : 0);
    row.fill.style.width = (fraction * 100).toFixed(1) + "%";
    const parts = [total > 0 ? `${bytes(done)} of ${bytes(total)} (${(fraction * 100).toFixed(1)} %)` : bytes(done)];
    if (d.status === "active") {
      parts.push(bytes(speed) + "/s");
      if (total > 0 && speed > 0) parts.push("ETA " + duration((total - done) / speed));
    }
    parts.push("priority " + (d["splitfetch.priority"] || "0"));
    row.figures.replaceChildren(...parts.map((text) => el("span", "", text)));
  }

  function button(label, action, handler, className) {
    const b = el("button", className || "", label);
    b.type = "button";
    b.dataset.action = action;
    b.addEventListener("click", () => {
      showError("action-error", null);
      handler().then(refreshSoon, (error) => showError("action-error", error));
    });
    return b;
  }

  function controls(d) {
    const box = el("div", "controls");
    const gid = d.gid;
    if (d.status === "active" || d.status === "waiting") {
      box.appendChild(button("Pause", "pause", () => call("aria2.pause", gid)));
    }
    if (d.status === "paused") box.appendChild(button("Resume", "resume", () => call("aria2.unpause", gid)));
    if (d.status === "active" || d.status === "waiting" || d.status === "paused") {
      box.appendChild(button("Up", "up", () => moveNextTo(gid, -1)));
      box.appendChild(button("Down", "down", () => moveNextTo(gid, 1)));
      const priority = el("input");
      priority.type = "number";
      priority.min = "-1000";
      priority.max = "1000";
      priority.value = d["splitfetch.priority"] || "0";
      priority.setAttribute("aria-label", "Priority");
      priority.dataset.field = "priority";
      box.appendChild(priority);
      box.appendChild(button("Set priority", "priority",
        () => call("aria2.changeOption", gid, { priority: String(parseInt(priority.value, 10) || 0) })));
      box.appendChild(button("Remove", "remove", () => call("aria2.remove", gid), "danger"));
    } else {
      box.appendChild(button("Clear", "clear", () => call("aria2.removeDownloadResult", gid)));
    }
    return box;
  }

  /// Moves a download to the place of its neighbour above (-1) or below (+1).
  function moveNextTo(gid, step) {
    const index = unfinishedOrder.indexOf(gid);
    const target = index + step;
    if (index < 0 || target < 0 || target >= unfinishedOrder.length) return Promise.resolve();
    return moveTo(gid, unfinishedOrder[target]);
  }

  function moveTo(gid, targetGid) {
    const target = rows.get(targetGid);
    const position = Number(target && target.download["splitfetch.position"]);
    if (!isFinite(position)) return Promise.resolve();
    return call("aria2.changePosition", gid, position, "POS_SET");
  }

  function makeDraggable(node, gid) {
    node.draggable = true;
    node.addEventListener("dragstart", (event) => {
      event.dataTransfer.setData("text/plain", gid);
      event.dataTransfer.effectAllowed = "move";
      node.classList.add("dragging");
    });
    node.addEventListener("dragend", () => node.classList.remove("dragging"));
    node.addEventListener("dragover", (event) => { event.preventDefault(); node.classList.add("drop-target"); });
    node.addEventListener("dragleave", () => node.classList.remove("drop-target"));
    node.addEventListener("drop", (event) => {
      event.preventDefault();
      node.classList.remove("drop-target");
      const moved = event.dataTransfer.getData("text/plain");
      if (moved && moved !== gid && rows.has(moved)) {
        moveTo(moved, gid).then(refreshSoon, (error) => showError("action-error", error));
      }
    });
  }

"""#
}

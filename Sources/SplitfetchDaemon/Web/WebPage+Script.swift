extension WebPage {
    /// The page's script. Every text from the daemon (names, URLs, messages) goes through
    /// `textContent`, never `innerHTML`; the token is kept in `localStorage` and sent inside each
    /// call over the WebSocket, never in a URL.
    static let script = #"""
"use strict";
(() => {
  const storeKey = "splitfetch.secret";
  const keys = ["gid", "status", "totalLength", "completedLength", "downloadSpeed", "connections", "files",
    "errorMessage", "splitfetch.priority", "splitfetch.position", "splitfetch.sha256"];
  const connectionStates = ["idle", "receiving", "retrying", "done"];
  let socket = null;
  let nextId = 1;
  const pending = new Map();
  let secret = null;
  let rows = new Map();          // gid -> the row's parts, as last drawn
  let unfinishedOrder = [];      // gids of unfinished downloads in queue order
  const samples = [];            // the whole queue's speed, one per progress message
  let refreshTimer = null;
  let reconnectDelay = 500;

  const $ = (id) => document.getElementById(id);

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  function bytes(n) {
    n = Number(n) || 0;
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n.toFixed(0) : n.toFixed(n < 10 ? 2 : 1)) + " " + units[i];
  }

  function duration(seconds) {
    if (!isFinite(seconds) || seconds < 0) return "";
    seconds = Math.round(seconds);
    const h = Math.floor(seconds / 3600), m = Math.floor(seconds / 60) % 60, s = seconds % 60;
    return h > 0 ? `${h} h ${m} min` : m > 0 ? `${m} min ${s} s` : `${s} s`;
  }

  class RpcError extends Error {
    constructor(error) { super(String(error && error.message)); this.code = error && error.code; }
  }

  // MARK: the connection

  function setStatus(text) { $("connection").textContent = text; }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + "/jsonrpc");
    setStatus("connecting");
    socket.onopen = () => { reconnectDelay = 500; setStatus("connected"); start(); };
    socket.onclose = () => {
      setStatus("disconnected; trying again");
      for (const waiter of pending.values()) waiter.reject(new Error("the connection closed"));
      pending.clear();
      setTimeout(connect, reconnectDelay);
      reconnectDelay = Math.min(reconnectDelay * 2, 10000);
    };
    socket.onmessage = (event) => {
      let message;
      try { message = JSON.parse(event.data); } catch (e) { return; }
      if (message.id !== undefined && pending.has(message.id)) {
        const waiter = pending.get(message.id);
        pending.delete(message.id);
        if (message.error) waiter.reject(new RpcError(message.error)); else waiter.resolve(message.result);
      } else if (message.method === "splitfetch.onProgress" && Array.isArray(message.params)) {
        progress(message.params[0]);
      } else if (typeof message.method === "string" && message.method.startsWith("aria2.onDownload")) {
        refreshSoon();
      }
    };
  }

  function call(method, ...params) {
    return new Promise((resolve, reject) => {
      if (!socket || socket.readyState !== WebSocket.OPEN) { reject(new Error("not connected")); return; }
      const id = nextId++;
      pending.set(id, { resolve, reject });
      socket.send(JSON.stringify({ jsonrpc: "2.0", id, method, params: ["token:" + secret, ...params] }));
    });
  }

  async function start() {
    secret = localStorage.getItem(storeKey);
    if (!secret) { showSignIn(""); return; }
    try {
      showLimit(await call("aria2.getGlobalOption"));
    } catch (error) {
      if (error instanceof RpcError && error.message === "Unauthorized") {
        localStorage.removeItem(storeKey);
        showSignIn("The daemon refused that secret.");
      } else {
        setStatus("error: " + error.message);
      }
      return;
    }
    showApp();
    try { await call("splitfetch.watchProgress"); } catch (error) { showError("action-error", error); }
    refresh();
  }

  function showSignIn(message) {
    $("app").hidden = true;
    $("signout").hidden = true;
    $("signin").hidden = false;
    $("signin-error").textContent = message;
    $("secret").focus();
  }

  function showApp() {
    $("signin").hidden = true;
    $("app").hidden = false;
    $("signout").hidden = false;
  }

  function showError(id, error) { $(id).textContent = error ? String(error.message || error) : ""; }

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

  // MARK: live progress

  function progress(message) {
    if (!message) return;
    $("total-speed").textContent = bytes(message.downloadSpeed) + "/s";
    samples.push(Number(message.downloadSpeed) || 0);
    if (samples.length > 120) samples.shift();
    drawGraph();
    for (const live of message.downloads || []) {
      const row = rows.get(live.gid);
      if (!row) { refreshSoon(); continue; }
      if (row.download.status !== "active") { refreshSoon(); continue; }
      if (live.completedLength === undefined) continue;
      update(row, live.completedLength, live.totalLength || 0, live.downloadSpeed);
      drawSegments(row.segmap, live);
    }
  }

  function drawSegments(box, live) {
    const total = Number(live.totalLength) || 0;
    const segments = live.segments || [];
    if (total <= 0 || segments.length === 0) { box.replaceChildren(); return; }
    const lane = (segs, owned) => {
      const laneNode = el("div", "lane");
      for (const [start, end, written, , split] of segs) {
        const seg = el("div", "seg" + (split ? " split" : "") + (written >= end ? " done" : ""));
        seg.style.left = (start / total * 100) + "%";
        seg.style.width = ((end - start) / total * 100) + "%";
        const w = el("div", "written");
        w.style.width = (end > start ? (written - start) / (end - start) * 100 : 100) + "%";
        seg.appendChild(w);
        laneNode.appendChild(seg);
      }
      if (owned !== undefined) laneNode.dataset.ranges = String(owned);
      return laneNode;
    };
    const fileRow = el("div", "segrow file");
    fileRow.append(el("span", "who", "file"), lane(segments));
    const parts = [fileRow];
    for (const [id, state, speed] of live.connections || []) {
      const mine = segments.filter((s) => s[3] === id);
      const row = el("div", "segrow connection");
      row.dataset.connection = String(id);
      const who = el("span", "who " + (connectionStates[state] || ""), `#${id}`);
      who.appendChild(el("span", "rate", ` ${bytes(speed)}/s`));
      who.title = `connection ${id}: ${connectionStates[state] || "unknown"}`;
      row.append(who, lane(mine, mine.length));
      parts.push(row);
    }
    const legend = el("div", "legend");
    const key = (color, text) => { const i = el("i"); i.style.background = color; legend.append(i, text); };
    key("#0b57d0", "written by its connection");
    key("#8a4b00", "split off a slower range");
    key("#1e7f3c", "complete");
    parts.push(legend);
    box.replaceChildren(...parts);
  }

  function drawGraph() {
    const canvas = $("speed-graph");
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth, height = canvas.clientHeight;
    if (width === 0 || height === 0) return;
    if (canvas.width !== Math.round(width * ratio)) { canvas.width = Math.round(width * ratio); canvas.height = Math.round(height * ratio); }
    const g = canvas.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, width, height);
    const top = Math.max(1024, ...samples);
    g.fillStyle = "#555";
    g.font = "11px system-ui, sans-serif";
    g.fillText(bytes(top) + "/s", 4, 12);
    g.strokeStyle = "#0b57d0";
    g.lineWidth = 1.5;
    g.beginPath();
    samples.forEach((value, i) => {
      const x = width - (samples.length - 1 - i) * (width / 119);
      const y = height - 2 - (value / top) * (height - 16);
      if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
    });
    g.stroke();
  }

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

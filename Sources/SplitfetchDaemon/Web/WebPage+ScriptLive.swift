extension WebPage {
    /// Live progress: each active row's figures, its segment map, the speed graph.
    static let scriptLive = #"""
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

"""#
}

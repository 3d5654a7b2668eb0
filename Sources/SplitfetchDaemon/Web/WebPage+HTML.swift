extension WebPage {
    /// The document: a sign-in form, then the queue's summary, the add form and the list.
    /// The script fills the list; nothing here comes from a server.
    static let html = #"""
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Splitfetch</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/app.css">
<script src="/app.js" defer></script>
</head>
<body>
<header>
  <h1>Splitfetch</h1>
  <span id="connection" class="status" role="status">not connected</span>
  <button id="signout" type="button" hidden>Forget secret</button>
</header>

<main>
<section id="signin" hidden>
  <form id="signin-form" autocomplete="off">
    <h2>Sign in</h2>
    <p>Enter the daemon's secret: the file <code>secret</code> in its state directory. It is kept in
      this browser's storage for this address, and sent only to this daemon.</p>
    <label>Secret <input id="secret" type="password" required autocomplete="current-password"></label>
    <button type="submit">Sign in</button>
    <p id="signin-error" class="error" role="alert"></p>
  </form>
</section>

<section id="app" hidden>
  <div id="overview">
    <div class="figures">
      <div><span class="label">Speed</span> <strong id="total-speed">0 B/s</strong></div>
      <div><span class="label">Active</span> <strong id="num-active">0</strong></div>
      <div><span class="label">Waiting</span> <strong id="num-waiting">0</strong></div>
      <div><span class="label">Stopped</span> <strong id="num-stopped">0</strong></div>
    </div>
    <canvas id="speed-graph" width="600" height="80" aria-label="Speed over the last minute"></canvas>
    <form id="limit-form" class="inline">
      <label>Speed limit <input id="limit" placeholder="0 = none, or 512K, 8M" size="10"></label>
      <button type="submit">Set</button>
      <span id="limit-now" class="muted"></span>
    </form>
  </div>

  <details id="add-panel">
    <summary>Add downloads</summary>
    <form id="add-form" autocomplete="off">
      <label for="add-urls">URLs: one download per line; more URLs on a line (after a space) are mirrors of the same file</label>
      <textarea id="add-urls" rows="3" required spellcheck="false"></textarea>
      <div class="row">
        <label>Mirrors of the first download (one per line)
          <textarea id="add-mirrors" rows="2" spellcheck="false"></textarea></label>
      </div>
      <div class="row">
        <label>Checksum <input id="add-checksum" placeholder="sha-256=hex" size="30" spellcheck="false"></label>
        <label>File name <input id="add-out" size="16" spellcheck="false"></label>
        <label>Priority <input id="add-priority" type="number" value="0" min="-1000" max="1000" step="1"></label>
        <label class="check"><input id="add-cd" type="checkbox"> Name from the server</label>
        <label class="check"><input id="add-paused" type="checkbox"> Paused</label>
      </div>
      <button type="submit">Add</button>
      <p id="add-error" class="error" role="alert"></p>
    </form>
  </details>

  <section>
    <h2>Downloads</h2>
    <p id="action-error" class="error" role="alert"></p>
    <ol id="downloads" class="downloads"></ol>
    <p id="empty" class="muted">No downloads yet.</p>
    <button id="purge" type="button">Clear finished</button>
  </section>
</section>
</main>
</body>
</html>
"""#
}

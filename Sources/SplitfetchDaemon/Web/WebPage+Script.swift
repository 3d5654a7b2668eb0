extension WebPage {
    /// The page's script, one function in four parts (each in a file of its own): the
    /// connection and sign-in, the list and its controls, the live progress (segment map and
    /// speed graph), and the forms. Every text from the daemon (names, URLs, messages) goes
    /// through `textContent`, never `innerHTML`; the token is kept in `localStorage` and sent
    /// inside each call over the WebSocket, never in a URL.
    static let script = scriptConnection + "\n" + scriptList + "\n" + scriptLive + "\n" + scriptForms

    /// The script's start: state, helpers, the WebSocket, calls, sign-in.
    static let scriptConnection = #"""
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

"""#
}

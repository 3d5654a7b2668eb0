extension WebPage {
    /// The style sheet: system fonts, dark text on light ground (contrast above 7:1 for text),
    /// one column on a phone.
    static let css = #"""
:root {
  --fg: #1a1a1a; --muted: #555; --bg: #fafafa; --card: #fff; --line: #d0d0d0; --accent: #0b57d0;
  --done: #1e7f3c; --bar: #e3e3e3; --error: #b3261e; --split: #8a4b00;
}
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; align-items: center; gap: 12px; padding: 10px 16px; background: #102a43; color: #fff; }
header h1 { font-size: 20px; margin: 0; flex: 1; }
header .status { font-size: 13px; }
header button { background: transparent; color: #fff; border-color: #fff; }
main { max-width: 1200px; margin: 0 auto; padding: 12px 16px 40px; }
h2 { font-size: 17px; margin: 16px 0 8px; }
button { font: inherit; padding: 4px 10px; border: 1px solid var(--accent); background: var(--card); color: var(--accent); border-radius: 4px; cursor: pointer; }
button:hover { background: #e8f0fe; }
button.danger { border-color: var(--error); color: var(--error); }
input, textarea { font: inherit; padding: 4px 6px; border: 1px solid #8a8a8a; border-radius: 4px; background: #fff; color: var(--fg); max-width: 100%; }
textarea { width: 100%; font-family: ui-monospace, monospace; font-size: 13px; }
label { display: inline-block; margin: 4px 12px 4px 0; }
label.check input { margin-right: 4px; }
.row { display: flex; flex-wrap: wrap; align-items: end; }
.row > label { flex: 0 1 auto; }
.row textarea { display: block; }
.error { color: var(--error); min-height: 1em; margin: 4px 0; }
.muted { color: var(--muted); }
#signin form { max-width: 480px; background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 16px; }
#overview { display: flex; flex-wrap: wrap; gap: 12px 24px; align-items: center; background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; }
#overview .figures { display: flex; gap: 18px; flex-wrap: wrap; }
#overview .label { color: var(--muted); font-size: 13px; }
#speed-graph { width: 100%; max-width: 600px; height: 80px; border: 1px solid var(--line); background: #fff; }
details { margin-top: 12px; background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; }
summary { cursor: pointer; font-weight: 600; }
ol.downloads { list-style: none; padding: 0; margin: 0; }
.download { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px; margin-bottom: 8px; }
.download.dragging { opacity: 0.5; }
.download.drop-target { border-color: var(--accent); border-width: 2px; }
.download .top { display: flex; flex-wrap: wrap; align-items: center; gap: 4px 12px; }
.download .name { font-weight: 600; word-break: break-all; flex: 1 1 240px; }
.download .state { font-size: 12px; text-transform: uppercase; letter-spacing: 0.04em; padding: 1px 6px; border-radius: 3px; background: #e0e0e0; }
.download .state.active { background: #d3e3fd; color: #0b3d91; }
.download .state.complete { background: #c4eed0; color: #0d4b22; }
.download .state.error { background: #f9dedc; color: #8c1d18; }
.download .state.paused { background: #fff0c2; color: #5c4400; }
.download .figures { font-size: 13px; color: var(--muted); display: flex; flex-wrap: wrap; gap: 2px 12px; }
.download .controls { display: flex; flex-wrap: wrap; gap: 4px; margin-top: 6px; }
.download .controls input { width: 5em; }
.download .url, .download .message { font-size: 12px; color: var(--muted); word-break: break-all; }
.download .message { color: var(--error); }
.bar { height: 8px; background: var(--bar); border-radius: 4px; overflow: hidden; margin: 6px 0 4px; }
.bar > div { height: 100%; background: var(--done); }
.segmap { margin-top: 6px; font-size: 12px; }
.segrow { display: flex; align-items: center; gap: 6px; margin: 2px 0; }
.segrow .who.retrying { color: var(--error); }
.segrow .who.idle, .segrow .who.done { color: #767676; }
.segrow .who { flex: 0 0 8em; color: var(--muted); white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.segrow .lane { position: relative; flex: 1; height: 12px; background: var(--bar); border-radius: 2px; overflow: hidden; }
.lane .seg { position: absolute; top: 0; bottom: 0; background: #c7d7f3; border-left: 1px solid #fff; }
.lane .seg .written { position: absolute; left: 0; top: 0; bottom: 0; background: var(--accent); }
.lane .seg.split { background: repeating-linear-gradient(135deg, #f4d7b5 0 4px, #fff 4px 8px); }
.lane .seg.split .written { background: var(--split); }
.lane .seg.done .written { background: var(--done); }
.segrow.file .lane .seg { background: transparent; }
.legend { color: var(--muted); font-size: 12px; }
.legend i { display: inline-block; width: 10px; height: 10px; margin: 0 3px 0 10px; vertical-align: -1px; }
@media (max-width: 600px) {
  main { padding: 8px; }
  .segrow .who { flex-basis: 2.5em; }
  .segrow .who .rate { display: none; }
  #speed-graph { height: 60px; }
  label { display: block; margin-right: 0; }
  .row > label { flex: 1 1 100%; }
  .download .controls button { padding: 6px 10px; }
}
"""#
}

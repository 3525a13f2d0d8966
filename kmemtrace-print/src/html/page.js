"use strict";
// Errors are shown on the page (and found there by the headless test).
window.addEventListener("error", function (e) {
  var box = document.getElementById("errors");
  box.hidden = false;
  box.textContent += "script error: " + e.message + "\n";
});
// Tables sort on a click of a heading: numbers by their exact value
// (data-v), largest first; text in order; a second click reverses.
document.querySelectorAll("table.sortable th").forEach(function (th) {
  th.addEventListener("click", function () {
    var table = th.closest("table");
    var body = table.tBodies[0];
    var col = Array.prototype.indexOf.call(th.parentNode.children, th);
    var numeric = th.dataset.type === "n";
    var first = numeric ? "desc" : "asc";
    var dir = th.classList.contains(first) ? (first === "asc" ? "desc" : "asc") : first;
    table.querySelectorAll("th").forEach(function (h) { h.classList.remove("asc", "desc"); });
    th.classList.add(dir);
    var sign = dir === "asc" ? 1 : -1;
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[col], y = b.cells[col];
      if (numeric) {
        return sign * (parseFloat(x.dataset.v || "0") - parseFloat(y.dataset.v || "0"));
      }
      return sign * x.textContent.localeCompare(y.textContent);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
// page.html#sort=TABLE.COLUMN (COLUMN from 0) opens a table sorted by
// that column, as a click on its heading would.
(function () {
  var m = /^#sort=([\w-]+)\.(\d+)$/.exec(location.hash);
  if (!m) return;
  var table = document.getElementById(m[1]);
  var th = table && table.tHead.rows[0].cells[Number(m[2])];
  if (th) th.click();
})();
document.body.dataset.ready = "yes";

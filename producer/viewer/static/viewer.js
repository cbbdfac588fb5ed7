// Runs table: click a header to sort, type to filter; live runs poll their progress.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const filter = document.getElementById("filter");
  if (filter) {
    filter.addEventListener("input", () => {
      const want = filter.value.toLowerCase();
      for (const tr of document.querySelectorAll("table.runs tbody tr")) {
        tr.hidden = !tr.textContent.toLowerCase().includes(want);
      }
    });
  }
  for (const table of document.querySelectorAll("table.sortable")) {
    table.querySelectorAll("th").forEach((th, col) => {
      th.addEventListener("click", () => {
        const body = table.tBodies[0];
        const dir = th.dataset.dir === "asc" ? -1 : 1;
        th.dataset.dir = dir === 1 ? "asc" : "desc";
        const rows = Array.from(body.rows);
        rows.sort((a, b) => dir * a.cells[col].textContent.localeCompare(
          b.cells[col].textContent, undefined, { numeric: true }));
        rows.forEach((r) => body.appendChild(r));
      });
    });
  }
  for (const el of document.querySelectorAll(".status[data-live='1']")) {
    const poll = async () => {
      try {
        const r = await fetch("/api/progress?run=" + encodeURIComponent(el.dataset.run));
        const p = await r.json();
        el.textContent = p.status_text || p.status || "—";
        const box = el.parentElement;
        const bar = box.querySelector("progress");
        if (bar) { bar.max = p.jobs; bar.value = p.rows; }
        const count = box.querySelector(".count");
        if (count) count.textContent = p.rows + "/" + p.jobs;
        if (p.status === "running" || p.status === "enqueueing") setTimeout(poll, 2000);
      } catch (e) { setTimeout(poll, 5000); }
    };
    setTimeout(poll, 2000);
  }
});

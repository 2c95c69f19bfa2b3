// Progressive enhancement only: every action works without this file.
(function () {
  "use strict";

  // Forms that change much ask once more.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) event.preventDefault();
  });

  document.querySelectorAll("[data-select-all]").forEach(function (input) {
    input.addEventListener("focus", function () { input.select(); });
  });
  document.querySelectorAll("[data-back]").forEach(function (link) {
    link.addEventListener("click", function (event) { event.preventDefault(); history.back(); });
  });

  // `?` shows the page's shortcut list as an overlay (without script it is a
  // <details> at the end of the page); Escape or `?` again hides it.
  var shortcuts = document.querySelector("[data-shortcuts]");
  if (shortcuts) {
    document.addEventListener("keydown", function (event) {
      var tag = (event.target.tagName || "").toLowerCase();
      if (tag === "input" || tag === "textarea" || tag === "select") return;
      var shown = shortcuts.classList.contains("overlay");
      if (event.key === "?" || (event.key === "Escape" && shown)) {
        shortcuts.classList.toggle("overlay", !shown);
        shortcuts.open = !shown;
        if (!shown) shortcuts.querySelector("summary").focus();
        event.preventDefault();
      }
    });
  }

  // Live regions ([data-live] with an id): refetch this page every 15 s while it is
  // visible and swap in the fresh regions; skipped while a control inside one has focus.
  var live = Array.prototype.slice.call(document.querySelectorAll("[data-live][id]"));
  if (live.length && window.fetch && window.DOMParser) {
    window.setInterval(function () {
      var active = document.activeElement;
      if (document.hidden || live.some(function (el) { return el !== active && el.contains(active); })) return;
      fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (!html) return;
          var doc = new DOMParser().parseFromString(html, "text/html");
          live.forEach(function (el) {
            var fresh = doc.getElementById(el.id);
            if (fresh && fresh.innerHTML !== el.innerHTML) el.innerHTML = fresh.innerHTML;
          });
        })
        .catch(function () {});  // offline or signed out: the next full load says so
    }, 15000);
  }

  // Review queue: j/k move, a approve (or keep), r retire, s skip, x select, n note.
  var queue = document.querySelector("[data-review]");
  if (!queue) return;
  var items = Array.prototype.slice.call(queue.querySelectorAll(".review-item"));
  if (!items.length) return;
  var current = Math.min(parseInt(queue.getAttribute("data-focus") || "0", 10) || 0, items.length - 1);

  function show(i) {
    items.forEach(function (item, j) { item.classList.toggle("current", j === i); });
    current = i;
    items[i].focus({ preventScroll: true });
    items[i].scrollIntoView({ block: "nearest" });
  }

  function press(key) {
    var target = items[current].querySelector('[data-key="' + key + '"]');
    if (!target) return false;
    if (target.tagName === "BUTTON") {
      var form = target.form;
      if (form.requestSubmit) form.requestSubmit(target); else target.click();
    } else {
      target.click();
    }
    return true;
  }

  document.addEventListener("keydown", function (event) {
    var tag = (event.target.tagName || "").toLowerCase();
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (tag === "input" || tag === "textarea" || tag === "select") {
      if (event.key === "Escape") event.target.blur();
      return;
    }
    var key = event.key;
    if (key === "j" || key === "ArrowDown") { show(Math.min(current + 1, items.length - 1)); }
    else if (key === "k" || key === "ArrowUp") { show(Math.max(current - 1, 0)); }
    else if (key === "s") {
      if (current + 1 < items.length) show(current + 1);
      else { var next = document.querySelector('a[rel="next"]'); if (next) next.click(); }
    }
    else if (key === "a" || key === "r") { if (!press(key)) return; }
    else if (key === "n") { var note = items[current].querySelector("[data-note]"); if (note) note.focus(); }
    else if (key === "x") {
      var box = items[current].querySelector("[data-select]");
      if (!box) return;
      box.checked = !box.checked;
      box.dispatchEvent(new Event("change", { bubbles: true }));
    }
    else { return; }
    event.preventDefault();
  });

  // The selection's size beside the buttons that act on it.
  var count = document.querySelector("[data-selected-count]");
  queue.addEventListener("change", function () {
    if (count) count.textContent = queue.querySelectorAll("[data-select]:checked").length + " ticked";
    items.forEach(function (item) {
      var box = item.querySelector("[data-select]");
      item.classList.toggle("selected", !!(box && box.checked));
    });
  });

  show(current);
})();

// The studio's one script: live updates and forms that post without a
// reload. No framework and no build step.
//
// Live: <body data-live-socket="/ws/studio/<game>/agents/<name>/"> opens a
// WebSocket. Each element with data-live-fragment="<name>" is re-rendered by
// the server (GET <page>?fragment=<name>) when an event whose type is listed
// in its data-live-on (space-separated; "*" for any) arrives. A socket that
// drops is opened again with ?since=<the last seq heard>: the studio sends
// the events missed meanwhile, and they re-render what they touch. Every
// fragment is refetched instead when there is nothing to resume from (the
// first connect, or no event heard yet) or when the studio answers
// `resync` (it no longer keeps what was missed) — so a page that missed
// events while disconnected catches up either way.
//
// The reply as it is written: <p data-reply hidden> shows the text of the
// turn being written, from its reply.delta events.
//
// Forms: <form data-async> posts with fetch and keeps the page; the button
// shows it is busy, and the JSON answer's "message" (or error) is shown in
// the form's [data-result] element, with its "link" (or the error's) after it.

(function () {
  "use strict";

  function csrfToken() {
    const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    if (match) return decodeURIComponent(match[1]);
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  // --- fragments -------------------------------------------------------------------

  const inFlight = new Map(); // fragment name -> {again: bool}

  function refetch(element) {
    const name = element.dataset.liveFragment;
    const state = inFlight.get(name);
    if (state) { state.again = true; return; }
    inFlight.set(name, { again: false });
    const url = new URL(window.location.href);
    url.searchParams.set("fragment", name);
    fetch(url, { headers: { "X-Requested-With": "fetch" }, credentials: "same-origin" })
      .then((response) => {
        // Signed out meanwhile: the fetch followed the redirect to sign-in.
        // Reload, so the person sees the sign-in page rather than a page
        // whose parts quietly stop updating.
        if (response.redirected && new URL(response.url).pathname.startsWith("/studio/login")) {
          window.location.reload();
          return Promise.reject("signed out");
        }
        return response.ok ? response.text() : Promise.reject(response.status);
      })
      .then((html) => {
        const replace = () => {
          const current = document.querySelector(`[data-live-fragment="${name}"]`);
          if (!current) return;
          const holder = document.createElement("div");
          holder.innerHTML = html.trim();
          const fresh = holder.firstElementChild;
          if (!fresh) return;
          keepOpenDetails(current, fresh);
          current.replaceWith(fresh);
          document.dispatchEvent(new CustomEvent("studio:fragment", { detail: { name } }));
        };
        if (pressed) afterPress.push(replace);
        else replace();
      })
      .catch(() => {})
      .finally(() => {
        const again = inFlight.get(name).again;
        inFlight.delete(name);
        if (again) {
          const current = document.querySelector(`[data-live-fragment="${name}"]`);
          if (current) refetch(current);
        }
      });
  }

  // No fragment is replaced while the main button is pressed: the press and the
  // release would land on different elements, and the click (opening a
  // <details>, following a link) would be lost. It waits for the release,
  // and the click that follows it.
  let pressed = false;
  const afterPress = [];
  const released = () => {
    pressed = false;
    setTimeout(() => afterPress.splice(0).forEach((replace) => replace()), 0);
  };
  document.addEventListener("pointerdown", (event) => { if (event.button === 0) pressed = true; }, true);
  document.addEventListener("pointerup", released, true);
  document.addEventListener("pointercancel", released, true);
  window.addEventListener("blur", released);

  // A <details> the reader opened stays open when its fragment is replaced.
  function keepOpenDetails(current, fresh) {
    current.querySelectorAll("details[open][id]").forEach((old) => {
      const twin = fresh.querySelector(`details[id="${CSS.escape(old.id)}"]`);
      if (twin) twin.open = true;
    });
  }

  function fragmentsFor(type) {
    return Array.from(document.querySelectorAll("[data-live-fragment]")).filter((element) => {
      const on = (element.dataset.liveOn || "*").split(/\s+/);
      return on.includes("*") || on.includes(type);
    });
  }

  // --- the socket ----------------------------------------------------------------------

  function connect(path) {
    const status = document.querySelector("[data-live-status]");
    const setStatus = (state, text) => {
      if (!status) return;
      status.dataset.state = state;
      status.textContent = text;
    };
    const refetchAll = () => document.querySelectorAll("[data-live-fragment]").forEach(refetch);
    let delay = 500;
    let lastSeq = null; // the seq of the newest event heard: where a reconnect resumes
    const open = () => {
      const scheme = window.location.protocol === "https:" ? "wss" : "ws";
      const since = lastSeq === null ? "" : `?since=${lastSeq}`;
      const socket = new WebSocket(`${scheme}://${window.location.host}${path}${since}`);
      socket.addEventListener("open", () => {
        delay = 500;
        setStatus("open", "live");
        if (lastSeq === null) refetchAll();
      });
      socket.addEventListener("message", (message) => {
        let event;
        try { event = JSON.parse(message.data); } catch (error) { return; }
        // Events come in seq order; a resync says where to carry on from.
        if (event.seq !== undefined) lastSeq = event.seq;
        document.dispatchEvent(new CustomEvent("studio:event", { detail: event }));
        if (event.type === "resync") refetchAll();
        else fragmentsFor(event.type).forEach(refetch);
      });
      socket.addEventListener("close", (closing) => {
        if (closing.code === 4401 || closing.code === 4404) {
          setStatus("closed", "not live");
          return;
        }
        setStatus("retrying", "reconnecting…");
        setTimeout(open, delay);
        delay = Math.min(delay * 2, 10000);
      });
    };
    open();
  }

  // --- the reply as it is written ------------------------------------------------------------

  // data-reply-streaming="true" while a turn's reply.delta events arrive;
  // the first words take the place of the send form's "Waiting for …". What
  // a model writes before a tool call is not the reply: a tool_call of the
  // same turn starts it afresh. turn.finished sets the reply as it ended. A
  // turn this page sent is shown by the form's answer, reply included: its
  // words as they came go then, and its later events show nothing more.
  function liveReply() {
    const answered = new Set();
    document.addEventListener("studio:event", ({ detail: event }) => {
      const reply = document.querySelector("[data-reply]");
      if (!reply || !event.turnId || answered.has(event.turnId)) return;
      if (event.type === "reply.delta") {
        if (reply.dataset.replyTurn !== event.turnId) {
          reply.dataset.replyTurn = event.turnId;
          reply.textContent = "";
        }
        reply.hidden = false;
        reply.dataset.replyStreaming = "true";
        reply.textContent += event.text;
        const form = reply.closest("form");
        const result = form && form.querySelector("[data-result]");
        if (result && result.textContent === form.dataset.busyText) result.textContent = "";
      } else if (reply.dataset.replyTurn === event.turnId && event.type === "tool_call") {
        reply.textContent = "";
      } else if (reply.dataset.replyTurn === event.turnId && event.type === "turn.finished") {
        delete reply.dataset.replyStreaming;
        reply.textContent = event.reply || "";
        reply.hidden = !event.reply;
      }
    });
    document.addEventListener("studio:posted", ({ detail }) => {
      const reply = detail.form.querySelector("[data-reply]");
      if (!reply) return;
      const turn = detail.ok && detail.data.turn;
      // A turn that waits for the game has no reply yet: its events still show it.
      if (turn && turn.status !== "waiting") answered.add(turn.id);
      if (!reply.dataset.replyStreaming || (turn && reply.dataset.replyTurn === turn.id)) {
        delete reply.dataset.replyStreaming;
        reply.textContent = "";
        reply.hidden = true;
      }
    });
  }

  // --- forms that post without a reload ----------------------------------------------------

  // Delegated, so forms inside re-rendered fragments work too.
  function asyncForms() {
    document.addEventListener("submit", (submitEvent) => {
      const form = submitEvent.target;
      if (!form.matches("form[data-async]")) return;
      submitEvent.preventDefault();
      const button = submitEvent.submitter || form.querySelector("button[type=submit]");
      const result = form.querySelector("[data-result]");
      const body = new FormData(form);
      if (button && button.name) body.append(button.name, button.value);
      if (button) { button.disabled = true; button.classList.add("busy"); }
      if (result) { result.textContent = form.dataset.busyText || "Working…"; result.className = "muted small"; }
      // getAttribute: a control named "action" would shadow form.action.
      fetch(form.getAttribute("action") || window.location.href, {
        method: "POST",
        body,
        headers: { "X-CSRFToken": csrfToken(), "X-Requested-With": "fetch", Accept: "application/json" },
        credentials: "same-origin",
      })
        .then((response) => response.json().then((data) => ({ ok: response.ok, data })))
        .then(({ ok, data }) => {
          const marked = fieldErrors(form, ok ? [] : (data.error && data.error.details) || []);
          if (result) {
            result.textContent = ok ? data.message || "Done." : marked || (data.error && data.error.message) || "Something went wrong.";
            result.className = ok ? "small" : "field-error";
            const link = ok ? data.link : data.error && data.error.link;
            if (link) appendLink(result, link);
          }
          if (ok && form.dataset.resetOnSuccess !== undefined) {
            form.querySelectorAll("textarea").forEach((area) => { area.value = ""; });
            form.querySelectorAll("input[type=checkbox]").forEach((box) => { box.checked = false; });
          }
          document.dispatchEvent(new CustomEvent("studio:posted", { detail: { form, ok, data } }));
          // Done, and the answer names the page that shows what was made.
          if (ok && data.redirect) window.location.assign(data.redirect);
        })
        .catch(() => {
          if (result) { result.textContent = "The studio could not be reached; try again."; result.className = "field-error"; }
        })
        .finally(() => {
          if (button) { button.disabled = false; button.classList.remove("busy"); }
        });
    });
  }

  // An error answer's details ({"field", "message"}) are shown beside the
  // form's fields they name, which are marked invalid (and shown, if they
  // were hidden: a confirmation asked for). Returns what the form's result
  // then says: the errors no field took, or where to look; "" when no field
  // took one. The marks of the form's last answer go first.
  function fieldErrors(form, details) {
    form.querySelectorAll("[data-field-error]").forEach((error) => error.remove());
    form.querySelectorAll("[data-marked-invalid]").forEach((input) => {
      input.removeAttribute("aria-invalid");
      input.removeAttribute("data-marked-invalid");
    });
    let first = null;
    const rest = [];
    details.forEach(({ field, message }) => {
      const input = field && form.querySelector(`[name="${CSS.escape(field)}"]`);
      if (!input) { rest.push(message); return; }
      const holder = input.closest("[data-field]") || input.closest(".field") || input.parentElement;
      holder.hidden = false;
      input.setAttribute("aria-invalid", "true");
      input.dataset.markedInvalid = "";
      const error = document.createElement("p");
      error.className = "field-error";
      error.setAttribute("role", "alert");
      error.dataset.fieldError = field;
      error.textContent = message;
      holder.append(error);
      first = first || input;
    });
    if (!first) return "";
    first.focus();
    return rest.join(" ") || "Check what is marked above, then try again.";
  }

  // An answer about a refusal the reader can have lifted (no credits, no
  // room under the cap) carries {"href", "text"}: where it is lifted.
  function appendLink(result, link) {
    const anchor = document.createElement("a");
    anchor.href = link.href;
    anchor.textContent = link.text;
    anchor.dataset.fix = "";
    result.append(" ", anchor);
  }

  // --- small helpers pages use ----------------------------------------------------------------

  // <button data-insert-target="#id" data-insert-from="#template-id"> appends a
  // <template>'s text to a textarea (the prompting help).
  function insertButtons() {
    document.addEventListener("click", (click) => {
      const button = click.target.closest("[data-insert-target]");
      if (!button) return;
      const target = document.querySelector(button.dataset.insertTarget);
      const source = document.querySelector(button.dataset.insertFrom);
      if (!target || !source) return;
      const text = source.content ? source.content.textContent : source.textContent;
      target.value = target.value.trimEnd() + (target.value.trim() ? "\n\n" : "") + text.trim() + "\n";
      target.dispatchEvent(new Event("input", { bubbles: true }));
      target.focus();
    });
  }

  // A JSON answer may carry "tone" ("warn" or "error") when the request
  // worked but its news is not good (a send whose turn failed): the form's
  // result is styled to match.
  function answerTones() {
    document.addEventListener("studio:posted", ({ detail }) => {
      const result = detail.form.querySelector("[data-result]");
      if (result && detail.ok && detail.data.tone) result.className = `result-${detail.data.tone}`;
    });
  }

  // <div data-memory-hint data-prompt="#textarea" data-toggle="#checkbox"
  // data-words='["memory", …]' hidden> shows while the checkbox is on and the
  // prompt, once something is typed, mentions none of the words (the
  // prompting warning, as one types).
  function memoryHints() {
    const check = (hint) => {
      const prompt = document.querySelector(hint.dataset.prompt);
      const toggle = document.querySelector(hint.dataset.toggle);
      if (!prompt || !toggle) return;
      const text = prompt.value.toLowerCase();
      const words = JSON.parse(hint.dataset.words || "[]");
      hint.hidden = !toggle.checked || !text.trim() || words.some((word) => text.includes(word.toLowerCase()));
    };
    const checkAll = () => document.querySelectorAll("[data-memory-hint]").forEach(check);
    document.addEventListener("input", checkAll);
    document.addEventListener("change", checkAll);
  }

  // <span data-rule-limit data-from="#max-tokens-field"> … <span
  // data-rule-limit-value>15,999</span> …</span>: the most maxOpenTokens may
  // be (below half of maxTokens, services.max_open_tokens_allowed), kept in
  // step with the field as it changes; hidden while it holds no number.
  function ruleLimits() {
    document.addEventListener("input", ({ target }) => {
      document.querySelectorAll("[data-rule-limit]").forEach((hint) => {
        if (!target.matches(hint.dataset.from)) return;
        const text = target.value.trim();
        const tokens = Number(text);
        hint.hidden = !/^\d+$/.test(text) || tokens < 2;
        if (!hint.hidden) {
          hint.querySelector("[data-rule-limit-value]").textContent = Math.floor((tokens - 1) / 2).toLocaleString("en-US");
        }
      });
    });
  }

  // <nav data-section-nav>: links to the page's sections (#id). The one
  // last jumped to is marked aria-current="location".
  function sectionNav() {
    const mark = () => document.querySelectorAll("[data-section-nav] a").forEach((link) => {
      if (link.hash && link.hash === window.location.hash) link.setAttribute("aria-current", "location");
      else link.removeAttribute("aria-current");
    });
    window.addEventListener("hashchange", mark);
    document.addEventListener("DOMContentLoaded", mark);
  }

  asyncForms();
  liveReply();
  insertButtons();
  answerTones();
  memoryHints();
  ruleLimits();
  sectionNav();

  document.addEventListener("DOMContentLoaded", () => {
    const path = document.body.dataset.liveSocket;
    if (path && "WebSocket" in window) connect(path);
  });

  window.studio = { refetch, csrfToken };
})();

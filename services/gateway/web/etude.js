// Shared by the gateway's pages: the API key, JSON requests, small DOM helpers.
// The API key (the operator token) never reaches the server in a URL: a `#token=` fragment
// is read here, kept in this browser's localStorage, and sent as the bearer.
"use strict";

const KEY_NAME = "etude-operator-token";

function apiKey() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.has("token")) {
    localStorage.setItem(KEY_NAME, fragment.get("token"));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return localStorage.getItem(KEY_NAME) || "";
}

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(path) {
  const reply = await fetch(path, { headers: { Authorization: `Bearer ${apiKey()}` } });
  const body = await reply.json().catch(() => ({}));
  if (!reply.ok) {
    throw new ApiError(reply.status, body.detail ? JSON.stringify(body.detail) : reply.statusText);
  }
  return body;
}

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "class") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fmt(value, digits = 3) {
  if (value === null || value === undefined || Number.isNaN(value)) return "—";
  return Number.isInteger(value) ? String(value) : Number(value).toPrecision(digits);
}

// Tells what went wrong where the page's content would be: no key, a bad key, the gateway.
function showError(where, error) {
  where.replaceChildren();
  if (error.status === 401 || error.status === 403) {
    const input = el("input", { type: "password", id: "api-key", placeholder: "operator token" });
    const save = el("button", { type: "button" }, "Use this key");
    save.addEventListener("click", () => {
      localStorage.setItem(KEY_NAME, input.value.trim());
      location.reload();
    });
    where.append(el("p", { class: "error" },
      "The gateway needs the operator token (.etude/auth/operator.token of the stack)."),
      input, save);
    return;
  }
  where.append(el("p", { class: "error" }, `The gateway answered: ${error.message}`));
}

function whenIso(ms) {
  return ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) : "—";
}

// Every page is the same shell (page.html): its script fills <main> with these sections,
// each an <h2> (when titled) over a <div id=…>, and the header's title.
function layout(title, sections) {
  document.getElementById("title").textContent = title;
  document.getElementById("page").replaceChildren(...sections.flatMap(([id, heading]) =>
    [heading ? el("h2", {}, heading) : null, el("div", { id })].filter(Boolean)));
}

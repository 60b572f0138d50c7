// Renders the pages' TeX with the KaTeX bundled in the site (assets/katex/, from npm).
// Markdown pages: arithmatex's \( \) and \[ \]. Tutorial pages: the notebooks' $ $ and
// $$ $$ as well, in their cells and in the table of contents their headings make.
function renderMaths(root) {
  const notebook = root.querySelector(".jupyter-wrapper") !== null;
  const delimiters = [
    { left: "\\[", right: "\\]", display: true },
    { left: "\\(", right: "\\)", display: false },
  ];
  if (notebook) {
    delimiters.unshift({ left: "$$", right: "$$", display: true });
    delimiters.push({ left: "$", right: "$", display: false });
  }
  renderMathInElement(root, { delimiters, throwOnError: false });
}

if (typeof document$ !== "undefined") {
  document$.subscribe(({ body }) => renderMaths(body));  // the theme's page-load stream
} else {
  document.addEventListener("DOMContentLoaded", () => renderMaths(document.body));
}

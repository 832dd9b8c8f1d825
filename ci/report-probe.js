// The probe ci/check-report-browser.sh puts into a copy of report.html: it measures the figures as Chromium
// laid them out and writes what it found into a <pre> at the end of the page, one line per SVG:
//
//   OK|BAD FIGURE SVG WxH marks=N texts=N axes=B overlaps=N clipped=N noticks=N unlegended=N collapsed=N minfont=PX
//
// followed by up to 6 indented lines per problem, then "PAGE ..." and "HEIGHT N". What each count is:
//   overlaps    pairs of <text> whose boxes (each text's bounding box mapped through its transform, so a
//               rotated label is a rotated rectangle) cross by more than 1 px in every direction;
//   clipped     <text> with a corner outside its <svg>'s box (the svg clips it), or, when the svg is not
//               inside a horizontally scrolling container, outside the page's width;
//   noticks     axes (<g class="axis">) with fewer tick labels than they need: data-categories="N" labels
//               for a categorical axis (every category named), else 2 (a numeric scale needs two);
//   unlegended  legend entries (<g class="legend"> ... [data-series=K]) for which no element [data-series=K]
//               outside the legend is drawn with a visible size: a key for a series that is not there;
//   collapsed   pairs of marks in one panel at distinct data x values ([data-x]) drawn under 4 px apart:
//               two measured lengths that a reader cannot tell apart;
//   minfont     the smallest rendered font size in CSS px (font-size times the svg's scale on the page);
//               under 9 px counts as unreadable.
// A figure is BAD when a count is not 0, minfont < 9, it is empty (under 200x80 px, no visible mark inside a
// <g class="panel">, under 4 texts, or not both an x and a y axis), or it is wider than its container without
// a scroll container around it. Legend texts must sit inside an element with data-series (else they count as
// unlegended: the probe cannot tell what they stand for). PAGE is BAD when the page scrolls sideways.
(function () {
  var ids = window.PACHECK_IDS || [], lines = [];
  var MIN_FONT = 9, TOL = 1, SHOW = 6;
  var pageW = document.documentElement.clientWidth;

  function short(s) {
    s = (s || '').replace(/\s+/g, ' ').trim();
    return JSON.stringify(s.length > 48 ? s.slice(0, 45) + '...' : s);
  }
  function corners(el) {
    var b = el.getBBox(), m = el.getScreenCTM();
    return [[b.x, b.y], [b.x + b.width, b.y], [b.x + b.width, b.y + b.height], [b.x, b.y + b.height]].map(function (p) {
      return [m.a * p[0] + m.c * p[1] + m.e, m.b * p[0] + m.d * p[1] + m.f];
    });
  }
  function aabb(q) {
    var xs = q.map(function (p) { return p[0]; }), ys = q.map(function (p) { return p[1]; });
    return {x0: Math.min.apply(null, xs), x1: Math.max.apply(null, xs), y0: Math.min.apply(null, ys), y1: Math.max.apply(null, ys)};
  }
  // Separating-axis test of two convex quadrilaterals: they overlap when, on every edge normal of both,
  // their projections overlap by more than TOL pixels.
  function overlap(a, b) {
    var quads = [a, b];
    for (var qi = 0; qi < 2; ++qi) {
      var q = quads[qi];
      for (var i = 0; i < 2; ++i) {
        var ex = q[i + 1][0] - q[i][0], ey = q[i + 1][1] - q[i][1];
        var len = Math.hypot(ex, ey);
        if (len < 1e-9) return false;
        var nx = -ey / len, ny = ex / len;
        var pa = a.map(function (p) { return p[0] * nx + p[1] * ny; });
        var pb = b.map(function (p) { return p[0] * nx + p[1] * ny; });
        var lo = Math.max(Math.min.apply(null, pa), Math.min.apply(null, pb));
        var hi = Math.min(Math.max.apply(null, pa), Math.max.apply(null, pb));
        if (hi - lo <= TOL) return false;
      }
    }
    return true;
  }
  function scroller(el) {
    for (var p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      var o = getComputedStyle(p).overflowX;
      if (o === 'auto' || o === 'scroll') return p;
    }
    return null;
  }
  function inLegend(el) {
    for (var p = el; p && p.tagName !== 'svg'; p = p.parentNode)
      if (p.classList && p.classList.contains('legend')) return true;
    return false;
  }
  function visible(el) {
    var b;
    try { b = el.getBoundingClientRect(); } catch (e) { return false; }
    var tag = el.tagName.toLowerCase();
    if (tag === 'line' || tag === 'polyline') return b.width + b.height >= 4;
    return b.width >= 1 && b.height >= 1;
  }

  function probe(fig, s) {
    var r = s.getBoundingClientRect(), bb = s.getBBox();
    var marks = s.querySelectorAll('rect, polyline, polygon, circle, line').length;
    var axes = s.querySelectorAll('.x-axis').length > 0 && s.querySelectorAll('.y-axis').length > 0;
    var scroll = scroller(s);
    var detail = {overlaps: [], clipped: [], noticks: [], unlegended: [], collapsed: []};
    var bad = [];

    // Text boxes: drawn <text> only (not <title>), with their screen quads.
    var texts = [];
    var minfont = Infinity;
    Array.prototype.forEach.call(s.querySelectorAll('text'), function (t) {
      if (!(t.getComputedTextLength() > 0)) return;
      var q = corners(t), m = t.getScreenCTM();
      var px = parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b);
      minfont = Math.min(minfont, px);
      texts.push({el: t, q: q, box: aabb(q)});
    });
    // Overlaps: sweep over the boxes sorted by their left edge.
    texts.sort(function (a, b) { return a.box.x0 - b.box.x0; });
    var overlaps = 0;
    for (var i = 0; i < texts.length; ++i) {
      for (var j = i + 1; j < texts.length && texts[j].box.x0 < texts[i].box.x1 - TOL; ++j) {
        var A = texts[i], B = texts[j];
        if (A.box.y1 - TOL <= B.box.y0 || B.box.y1 - TOL <= A.box.y0) continue;
        if (!overlap(A.q, B.q)) continue;
        ++overlaps;
        if (detail.overlaps.length < SHOW)
          detail.overlaps.push('overlap ' + short(A.el.textContent) + ' x ' + short(B.el.textContent));
      }
    }
    // Clipping by the svg's box and, with no scroll container, by the page's width.
    var clipped = 0;
    texts.forEach(function (t) {
      var b = t.box, why = '';
      if (b.x0 < r.left - 0.5 || b.x1 > r.right + 0.5 || b.y0 < r.top - 0.5 || b.y1 > r.bottom + 0.5) why = 'outside its svg';
      else if (!scroll && (b.x0 < -0.5 || b.x1 > pageW + 0.5)) why = 'outside the page';
      if (!why) return;
      ++clipped;
      if (detail.clipped.length < SHOW)
        detail.clipped.push('clipped ' + short(t.el.textContent) + ' ' + why + ' (text ' + Math.round(b.x0) + '..' +
                            Math.round(b.x1) + ' x ' + Math.round(b.y0) + '..' + Math.round(b.y1) + ', svg ' +
                            Math.round(r.left) + '..' + Math.round(r.right) + ' x ' + Math.round(r.top) + '..' + Math.round(r.bottom) + ')');
    });
    // Axes: tick labels (every text of the axis but its title).
    var noticks = 0;
    Array.prototype.forEach.call(s.querySelectorAll('g.axis'), function (g) {
      var labels = Array.prototype.filter.call(g.querySelectorAll('text'), function (t) {
        return !t.classList.contains('axis-label') && t.getComputedTextLength() > 0;
      }).length;
      var want = g.hasAttribute('data-categories') ? parseInt(g.getAttribute('data-categories'), 10) : 2;
      if (labels >= want) return;
      ++noticks;
      if (detail.noticks.length < SHOW)
        detail.noticks.push('noticks ' + (g.classList.contains('x-axis') ? 'x' : 'y') + ' axis ' +
                            short((g.querySelector('.axis-label') || {}).textContent) + ': ' + labels + ' tick label(s), needs ' + want);
    });
    // Legend entries against what is drawn. A legend text that names no series cannot be checked: it counts.
    var unlegended = 0, seen = {};
    Array.prototype.forEach.call(s.querySelectorAll('.legend text'), function (t) {
      if (t.classList.contains('mark') || t.closest('[data-series]')) return;
      ++unlegended;
      if (detail.unlegended.length < SHOW) detail.unlegended.push('unlegended ' + short(t.textContent) + ': a legend entry with no data-series');
    });
    Array.prototype.forEach.call(s.querySelectorAll('.legend [data-series]'), function (e) {
      var key = e.getAttribute('data-series');
      if (seen[key]) return;
      seen[key] = true;
      var drawn = Array.prototype.some.call(s.querySelectorAll('[data-series]'), function (d) {
        return d.getAttribute('data-series') === key && !inLegend(d) && visible(d);
      });
      if (drawn) return;
      ++unlegended;
      if (detail.unlegended.length < SHOW) detail.unlegended.push('unlegended ' + short(key) + ': in the legend, not drawn');
    });
    // Marks at distinct data x that land on (almost) the same pixel column, per panel.
    var collapsed = 0, panels = {};
    Array.prototype.forEach.call(s.querySelectorAll('[data-x]'), function (e) {
      var p = e.closest('.panel'), key = p ? Array.prototype.indexOf.call(s.querySelectorAll('.panel'), p) : -1;
      var b = e.getBoundingClientRect();
      (panels[key] = panels[key] || []).push({x: e.getAttribute('data-x'), px: b.left + b.width / 2});
    });
    Object.keys(panels).forEach(function (k) {
      var at = {};
      panels[k].forEach(function (m) { if (!(m.x in at)) at[m.x] = m.px; });
      var xs = Object.keys(at).map(function (x) { return {x: x, px: at[x]}; }).sort(function (a, b) { return a.px - b.px; });
      for (var i = 1; i < xs.length; ++i) {
        if (xs[i].px - xs[i - 1].px >= 4) continue;
        ++collapsed;
        if (detail.collapsed.length < SHOW)
          detail.collapsed.push('collapsed x=' + xs[i - 1].x + ' and x=' + xs[i].x + ' drawn ' +
                                (xs[i].px - xs[i - 1].px).toFixed(1) + ' px apart');
      }
    });

    var container = s.parentElement.getBoundingClientRect();
    if (!scroll && (r.width > container.width + 0.5 || r.right > pageW + 0.5)) bad.push('wider than its container (' + Math.round(r.width) + ' > ' + Math.round(container.width) + ') with no scroll container');
    var drawn = Array.prototype.some.call(s.querySelectorAll('.panel rect, .panel polyline, .panel polygon, .panel circle, .panel line'), visible);
    if (!(r.width >= 200 && r.height >= 80 && bb.width > 0 && bb.height > 0 && drawn && texts.length >= 4 && axes))
      bad.push('empty: ' + Math.round(r.width) + 'x' + Math.round(r.height) + ', ' + (drawn ? '' : 'no visible mark in a panel, ') +
               texts.length + ' texts, axes ' + axes);
    if (minfont < MIN_FONT) bad.push('text rendered at ' + minfont.toFixed(1) + ' px');
    var ok = !bad.length && !overlaps && !clipped && !noticks && !unlegended && !collapsed;
    lines.push((ok ? 'OK ' : 'BAD ') + fig + ' ' + s.id + ' ' + Math.round(r.width) + 'x' + Math.round(r.height) +
               ' marks=' + marks + ' texts=' + texts.length + ' axes=' + axes + ' overlaps=' + overlaps + ' clipped=' + clipped +
               ' noticks=' + noticks + ' unlegended=' + unlegended + ' collapsed=' + collapsed +
               ' minfont=' + (isFinite(minfont) ? minfont.toFixed(1) : '-') + (scroll ? ' scrolls' : ''));
    bad.forEach(function (b) { lines.push('  ' + b); });
    ['overlaps', 'clipped', 'noticks', 'unlegended', 'collapsed'].forEach(function (k) {
      detail[k].forEach(function (d) { lines.push('  ' + d); });
    });
  }

  ids.forEach(function (id) {
    var el = document.getElementById(id);
    if (!el) { lines.push('MISSING ' + id); return; }
    if (!el.querySelector('figcaption') || el.querySelector('figcaption').textContent.indexOf('Good') < 0)
      lines.push('NOCAPTION ' + id);
    var svgs = el.querySelectorAll('svg');
    if (!svgs.length) { lines.push('NOSVG ' + id); return; }
    svgs.forEach(function (s) { probe(id, s); });
  });
  var sw = document.documentElement.scrollWidth;
  lines.push((sw > pageW + 1 ? 'BAD ' : 'OK ') + 'PAGE width=' + pageW + ' scrollWidth=' + sw);
  lines.push('HEIGHT ' + Math.ceil(document.documentElement.scrollHeight));
  var pre = document.createElement('pre');
  pre.id = 'pacheck-browser-check';
  pre.textContent = '\n' + lines.join('\n') + '\n';
  document.body.appendChild(pre);
})();

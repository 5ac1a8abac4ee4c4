// The flowchart: Cytoscape.js renders (zoom, pan, selection), dagre lays it out
// (cytoscape-dagre). Nodes are coloured by status; edges show the branch taken, the
// branches not taken, forks, joins and loop iterations (GET /api/workflow/{id}/graph).

import cytoscape from 'cytoscape';
import dagre from 'cytoscape-dagre';

cytoscape.use(dagre);

export const STATUS_COLOURS = {
  COMPLETED: '#2e9d57',
  COMPLETED_WITH_ERRORS: '#8fb339',
  IN_PROGRESS: '#2f7fd8',
  SCHEDULED: '#9cc3ef',
  FAILED: '#d64545',
  FAILED_WITH_TERMINAL_ERROR: '#a82828',
  TIMED_OUT: '#e07b24',
  CANCELED: '#8a8a8a',
  SKIPPED: '#c9a227',
};
const NOT_REACHED = '#e6e6e6';

const SHAPES = {
  SWITCH: 'diamond',
  DECISION: 'diamond',
  FORK_JOIN: 'hexagon',
  FORK_JOIN_DYNAMIC: 'hexagon',
  JOIN: 'hexagon',
  EXCLUSIVE_JOIN: 'hexagon',
  DO_WHILE: 'barrel',
  SUB_WORKFLOW: 'cut-rectangle',
  WAIT: 'octagon',
  TERMINATE: 'octagon',
};

export function nodeLabel(n) {
  const iter = n.iteration > 0 ? ` #${n.iteration}` : '';
  return `${n.ref}${iter}\n${n.type}`;
}

function elements(graph) {
  const nodes = graph.nodes.map((n) => ({
    group: 'nodes',
    data: {
      id: n.id,
      label: nodeLabel(n),
      colour: STATUS_COLOURS[n.status] || NOT_REACHED,
      textColour: n.status && !['SCHEDULED', 'SKIPPED'].includes(n.status) ? '#fff' : '#222',
      shape: SHAPES[n.type] || 'round-rectangle',
      status: n.status || '',
    },
    classes: n.logical ? 'logical' : 'activity',
  }));
  const edges = graph.edges.map((e, i) => ({
    group: 'edges',
    data: { id: `e${i}:${e.from}->${e.to}`, source: e.from, target: e.to, label: e.label || '' },
    classes: [e.kind, e.followed ? 'followed' : 'not-followed'].join(' '),
  }));
  return [...nodes, ...edges];
}

const STYLE = [
  { selector: 'node', style: {
    'background-color': 'data(colour)', shape: 'data(shape)', label: 'data(label)',
    color: 'data(textColour)', 'text-wrap': 'wrap', 'text-valign': 'center', 'text-halign': 'center',
    'font-size': 12, width: 150, height: 44, 'border-width': 1, 'border-color': '#555',
  } },
  { selector: 'node.logical', style: { 'border-style': 'dashed', height: 52 } },
  { selector: 'node:selected', style: { 'border-width': 4, 'border-color': '#111' } },
  { selector: 'edge', style: {
    width: 1.5, 'curve-style': 'bezier', 'target-arrow-shape': 'triangle',
    'line-color': '#999', 'target-arrow-color': '#999', label: 'data(label)', 'font-size': 10,
    'text-background-color': '#fff', 'text-background-opacity': 1,
  } },
  { selector: 'edge.followed', style: { 'line-color': '#333', 'target-arrow-color': '#333', width: 2.5 } },
  { selector: 'edge.branch_taken', style: { 'line-color': '#2e9d57', 'target-arrow-color': '#2e9d57', width: 3 } },
  { selector: 'edge.branch_not_taken', style: { 'line-style': 'dashed', 'line-color': '#ccc', 'target-arrow-color': '#ccc' } },
  { selector: 'edge.loop_back', style: { 'line-style': 'dashed', 'curve-style': 'unbundled-bezier', 'control-point-distances': 60 } },
];

/** A flowchart in `container`; `onSelect(nodeId)` on a tap. */
export class Flowchart {
  constructor(container, onSelect) {
    this.cy = cytoscape({
      container,
      style: STYLE,
      minZoom: 0.1,
      maxZoom: 3,
      boxSelectionEnabled: false,
      autoungrabify: true,
    });
    this.shape = '';
    this.cy.on('tap', 'node', (e) => onSelect(e.target.id()));
  }

  /** Shows `graph`: laid out again only when its nodes or edges changed. */
  update(graph) {
    const shape = JSON.stringify([graph.nodes.map((n) => n.id), graph.edges.map((e) => [e.from, e.to, e.kind])]);
    const els = elements(graph);
    if (shape !== this.shape) {
      const selected = this.selected();
      this.cy.elements().remove();
      this.cy.add(els);
      // The first layout fits the view; later ones (a loop's new iteration) keep the
      // operator's zoom and pan.
      const first = !this.shape;
      this.cy.layout({ name: 'dagre', rankDir: 'TB', nodeSep: 30, rankSep: 45, edgeSep: 10, fit: first, padding: 20 }).run();
      if (first) {
        // A tall graph gets a taller view (up to most of the window) before zoom and pan.
        const bb = this.cy.elements().boundingBox();
        const box = this.cy.container();
        const want = Math.min(Math.max(bb.h + 40, 320), Math.max(window.innerHeight - 120, 480));
        if (Math.abs(want - box.clientHeight) > 20) {
          box.style.height = `${want}px`;
          this.cy.resize();
        }
        this.cy.fit(undefined, 20);
        if (this.cy.zoom() > 1.2) {
          this.cy.zoom(1.2);
          this.cy.center();
        }
      }
      if (selected) this.select(selected);
      this.shape = shape;
    } else {
      for (const el of els) this.cy.getElementById(el.data.id).data(el.data).classes(el.classes);
    }
  }

  select(id) {
    this.cy.nodes().unselect();
    const n = this.cy.getElementById(id);
    if (n.nonempty()) n.select();
  }

  selected() {
    const s = this.cy.nodes(':selected');
    return s.nonempty() ? s[0].id() : null;
  }

  zoom(factor) {
    const c = this.cy;
    c.zoom({ level: c.zoom() * factor, renderedPosition: { x: c.width() / 2, y: c.height() / 2 } });
  }

  fit() { this.cy.fit(undefined, 20); }

  /** Where node `id` is drawn, in page coordinates (for tests and tooltips). */
  pagePosition(id) {
    const n = this.cy.getElementById(id);
    if (n.empty()) return null;
    const box = this.cy.container().getBoundingClientRect();
    const p = n.renderedPosition();
    return { x: box.left + p.x, y: box.top + p.y };
  }

  destroy() { this.cy.destroy(); }
}

/*
 * neuron-migrate's piece of JupyterLab (and of Notebook 7).
 *
 * The kernel extension (`%load_ext neuron_migrate`) talks to it on the comm `neuron_migrate`
 * (neuron_migrate/jupyter/bridge.py holds the other end): the tab says which notebook it shows
 * and whether it has unsaved changes; the kernel asks it to edit a notebook or a file open in this
 * window, which it does in the open document (so that undo works there and no later save brings
 * the old text back), then saves it through Jupyter's contents API. It also makes the "Replace
 * cell" and "Insert below" buttons of %%neuron_migrate work, keeps the static view a
 * neuron-migrate widget carries up to date in the notebook it saves (a validation's result goes
 * into the notebook as soon as the kernel sends it), and shows that view where the widget itself
 * is gone (a saved notebook, reopened).
 *
 * A prebuilt extension without a build step: this file registers the module-federation container
 * (`init`, `get`) that JupyterLab's loader asks for, imports nothing, and reaches JupyterLab only
 * through the application object its plugin is activated with.
 */
(function () {
  "use strict";

  var NAME = "neuron-migrate";
  var TARGET = "neuron_migrate";
  var WIDGET_VIEW = "application/vnd.jupyter.widget-view+json";
  var STATIC_MARK = "nm-static";

  var handled = new Set(); // edits done in this window, as "kernel id:request number"
  var staticViews = new Map(); // widget model id -> the static view the kernel sent last

  function serverRoot() {
    try {
      return JSON.parse(document.getElementById("jupyter-config-data").textContent).serverRoot || "";
    } catch (error) {
      return "";
    }
  }

  function documents(app) {
    var found = [];
    for (var widget of app.shell.widgets("main")) {
      if (widget && widget.context && typeof widget.context.path === "string") {
        found.push(widget);
      }
    }
    return found;
  }

  function isNotebook(widget) {
    return !!(widget && widget.content && widget.content.model && widget.content.model.cells &&
      widget.sessionContext);
  }

  // -- edits the kernel asks for ----------------------------------------------------------------

  function edit(app, request) {
    var open = documents(app).filter(function (w) { return w.context.path === request.path; });
    if (!open.length) {
      return Promise.resolve({ done: false, open: false });
    }
    var context = open[0].context;
    var model = context.model;
    var already = false; // the tab holds what the edit writes already
    if (request.cells) {
      var cells = model.cells;
      // A cell that holds what the edit writes already is left as it is.
      var changes = request.cells.filter(function (c) {
        return !(c.index < cells.length && cells.get(c.index).sharedModel.getSource() === c.new);
      });
      for (var c of changes) {
        if (c.index >= cells.length || cells.get(c.index).sharedModel.getSource() !== c.old) {
          return Promise.resolve({
            done: false,
            open: true,
            error: request.undo
              ? "cell " + (c.index + 1) + " in the open tab was edited since the migration was " +
                "written, so the cells are not restored (the tab's own undo, Ctrl+Z, still can)"
              : "cell " + (c.index + 1) + " in the open tab is not the cell that was migrated " +
                "(it was edited since, or not saved): save the notebook, then migrate it again"
          });
        }
      }
      for (var change of changes) {
        cells.get(change.index).sharedModel.setSource(change.new);
      }
      already = !changes.length;
    } else if (model.sharedModel.getSource() === request.text.new) {
      already = true;
    } else {
      if (model.sharedModel.getSource() !== request.text.old) {
        return Promise.resolve({
          done: false,
          open: true,
          error: request.undo
            ? "the open tab was edited since the migration was written, so it is not restored " +
              "(the tab's own undo, Ctrl+Z, still can)"
            : "the open tab does not hold the text that was migrated (it was edited since, " +
              "or not saved): save it, then migrate it again"
        });
      }
      model.sharedModel.setSource(request.text.new);
    }
    // Saved also when it held the edit already: what the tab shows is what the file holds.
    return context.save().then(
      function () { return { done: true, open: true, already: already }; },
      function (error) {
        return { done: false, open: true, error: "the tab could not save it: " + error };
      }
    );
  }

  // -- the comm with each notebook's kernel -----------------------------------------------------

  function listen(app, panel, comm, kernelId) {
    function say(data) {
      try {
        comm.send(data);
      } catch (error) {
        // the kernel went away: nothing to tell
      }
    }
    function hello(event) {
      var model = panel.context.model;
      say({ event: event, root: serverRoot(), path: panel.context.path, dirty: !!(model && model.dirty) });
    }
    comm.onMsg = function (message) {
      var data = (message.content && message.content.data) || {};
      if (data.op === "edit") {
        var key = kernelId + ":" + data.request;
        if (handled.has(key)) {
          return; // another comm of this window has done it
        }
        handled.add(key);
        edit(app, data).then(function (answer) {
          answer.reply = data.request;
          say(answer);
        });
      } else if (data.op === "static" && data.model_id) {
        staticViews.set(data.model_id, data.data || {});
        if (data.now) {
          // A result (a validation's verdict): into the notebook at once, for its next save.
          putStaticViews(panel);
        }
      }
    };
    hello("hello");
    panel.context.pathChanged.connect(function () { hello("path"); });
    panel.context.model.stateChanged.connect(function (model, change) {
      if (change.name === "dirty") {
        say({ event: "dirty", dirty: !!change.newValue });
      }
    });
  }

  function connect(app, panel) {
    var session = panel.sessionContext;
    function attach() {
      var kernel = session.session && session.session.kernel;
      if (!kernel || kernel.neuronMigrateTarget) {
        return;
      }
      kernel.neuronMigrateTarget = true;
      kernel.registerCommTarget(TARGET, function (comm) { listen(app, panel, comm, kernel.id); });
      // After a reload of the page, the comm the kernel opened is still open: take it up again.
      kernel.requestCommInfo({ target_name: TARGET }).then(function (reply) {
        var comms = (reply.content && reply.content.comms) || {};
        Object.keys(comms).forEach(function (id) {
          if (!kernel.hasComm(id)) {
            listen(app, panel, kernel.createComm(TARGET, id), kernel.id);
          }
        });
      }).catch(function () {});
    }
    session.kernelChanged.connect(attach);
    session.ready.then(attach).catch(function () {});
    attach();
  }

  // -- static views of widgets ------------------------------------------------------------------

  function withStaticView(renderer, rendermime) {
    var render = renderer.renderModel.bind(renderer);
    renderer.renderModel = function (model) {
      var html = model.data["text/html"];
      var rendering = render(model);
      if (typeof html !== "string" || html.indexOf(STATIC_MARK) < 0) {
        return rendering;
      }
      return rendering.then(function () {
        var live = renderer.widgets && renderer.widgets.length > 0;
        var text = (renderer.node.textContent || "").trim();
        if (live || !/^(Loading widget|Error displaying widget)/.test(text)) {
          return undefined;
        }
        // No live widget (its kernel is gone): show what it showed when the notebook was saved.
        var view = rendermime.createRenderer("text/html");
        var data = { "text/html": html };
        return view.renderModel({
          data: data,
          metadata: model.metadata || {},
          trusted: model.trusted,
          setData: function () {}
        }).then(function () {
          if (!(renderer.widgets && renderer.widgets.length)) {
            renderer.node.textContent = "";
            renderer.node.appendChild(view.node);
          }
        });
      });
    };
    return renderer;
  }

  function wrapWidgetViews(panel) {
    var rendermime = panel.content && panel.content.rendermime;
    if (!rendermime || typeof rendermime.getFactory !== "function") {
      return;
    }
    var factory = rendermime.getFactory(WIDGET_VIEW);
    if (!factory || factory.neuronMigrate) {
      return;
    }
    rendermime.addFactory({
      safe: factory.safe,
      mimeTypes: factory.mimeTypes,
      defaultRank: factory.defaultRank,
      neuronMigrate: true,
      createRenderer: function (options) {
        return withStaticView(factory.createRenderer(options), rendermime);
      }
    }, rendermime.getRank(WIDGET_VIEW));
  }

  function keepStaticViews(panel) {
    // Just before a save, put the latest static view of each widget into its output.
    panel.context.saveState.connect(function (context, state) {
      if (state === "started") {
        putStaticViews(panel);
      }
    });
  }

  function putStaticViews(panel) {
    // The latest static view of each widget, into the widget's outputs in the notebook's model
    // (those that differ from it only: a changed output is drawn again).
    if (!staticViews.size || !panel.content || !panel.content.model) {
      return;
    }
    var cells = panel.content.model.cells;
    for (var i = 0; i < cells.length; i++) {
      var outputs = cells.get(i).outputs;
      for (var j = 0; outputs && j < outputs.length; j++) {
        var output = outputs.get(j);
        var view = output.data[WIDGET_VIEW];
        var fresh = view && staticViews.get(view.model_id);
        if (!fresh) {
          continue;
        }
        var json = output.toJSON();
        var stale = Object.keys(fresh).some(function (key) {
          return JSON.stringify(json.data[key]) !== JSON.stringify(fresh[key]);
        });
        if (stale) {
          json.data = Object.assign({}, json.data, fresh);
          json.data[WIDGET_VIEW] = JSON.parse(JSON.stringify(view));
          outputs.set(j, json);
        }
      }
    }
  }

  // -- the buttons of %%neuron_migrate ----------------------------------------------------------

  function onAction(app, event) {
    var button = event.target && event.target.closest ? event.target.closest(".nm-action") : null;
    if (!button) {
      return;
    }
    var panel = documents(app).filter(function (w) { return isNotebook(w) && w.node.contains(button); })[0];
    var cell = panel && panel.content.widgets.filter(function (c) { return c.node.contains(button); })[0];
    var out = button.closest(".nm-out");
    var code = out && out.querySelector(".nm-migrated-source");
    if (!cell || !code) {
      return;
    }
    event.preventDefault();
    event.stopPropagation();
    var status = out.querySelector(".nm-action-status");
    if (!trustedOutput(cell, button)) {
      // Only what this kernel showed may go into the notebook, never what a notebook brought.
      if (status) {
        status.textContent = "not trusted: run the cell again to use these buttons";
      }
      return;
    }
    var shared = cell.model.sharedModel;
    var text = code.textContent;
    var said = "";
    if (button.classList.contains("nm-replace-cell")) {
      if (button.neuronMigratePrevious === undefined) {
        button.neuronMigratePrevious = shared.getSource();
        shared.setSource(text);
        button.textContent = "Undo replace";
        said = "replaced: run the cell to use the migrated code";
      } else if (shared.getSource() === text) {
        shared.setSource(button.neuronMigratePrevious);
        button.neuronMigratePrevious = undefined;
        button.textContent = "Replace cell";
        said = "restored";
      } else {
        said = "not restored: the cell was edited since it was replaced";
      }
    } else if (button.classList.contains("nm-insert-below")) {
      var index = panel.content.widgets.indexOf(cell);
      panel.content.model.sharedModel.insertCell(index + 1, { cell_type: "code", source: text });
      panel.content.activeCellIndex = index + 1;
      said = "inserted below";
    }
    if (status) {
      status.textContent = said;
    }
  }

  function trustedOutput(cell, node) {
    var area = cell.outputArea;
    if (!area || !area.widgets || !cell.model.outputs) {
      return false;
    }
    for (var i = 0; i < area.widgets.length; i++) {
      if (area.widgets[i].node.contains(node)) {
        var output = cell.model.outputs.get(i);
        return !!(output && output.trusted);
      }
    }
    return false;
  }

  function addStyle() {
    var style = document.createElement("style");
    style.textContent = ".nm-out .nm-actions { display: block !important; }";
    document.head.appendChild(style);
  }

  var plugin = {
    id: "neuron-migrate:notebook",
    description: "Lets neuron-migrate's kernel extension edit open notebooks; keeps widgets' static views",
    autoStart: true,
    activate: function (app) {
      addStyle();
      document.addEventListener("click", function (event) { onAction(app, event); }, true);
      var seen = new WeakSet();
      function track(widget) {
        if (!isNotebook(widget) || seen.has(widget)) {
          return;
        }
        seen.add(widget);
        wrapWidgetViews(widget);
        // ipywidgets may register its renderer only once the document is there.
        widget.context.ready.then(function () { wrapWidgetViews(widget); }).catch(function () {});
        connect(app, widget);
        keepStaticViews(widget);
      }
      app.docRegistry.addWidgetExtension("Notebook", { createNew: function (panel) { track(panel); } });
      app.restored.then(function () { documents(app).forEach(track); });
    }
  };

  var registry = (window._JUPYTERLAB = window._JUPYTERLAB || {});
  registry[NAME] = {
    init: function () { return Promise.resolve(); },
    get: function (module) {
      if (module !== "./extension") {
        return Promise.reject(new Error(NAME + " has no module " + module));
      }
      return Promise.resolve(function () { return { __esModule: true, default: [plugin] }; });
    }
  };
})();

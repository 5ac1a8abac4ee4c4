//! The JavaScript sandbox behind Conductor's script-valued fields: `DO_WHILE.loopCondition`,
//! `SWITCH` with `evaluatorType` `"javascript"` or `"graaljs"`, `DECISION.caseExpression` and
//! `INLINE` tasks.
//!
//! # How Conductor evaluates these, and how Weft mirrors it
//!
//! Conductor's `ScriptEvaluator.eval(script, input)` binds the input map to the global `$` and
//! evaluates the script; the completion value of the script (the value of its last expression
//! statement) is the result. So `$.value > 1`, `if ($.x == 'a') 'yes'; else 'no';` and
//! `(function(){ return $.a + 1; })()` all work, in sloppy (non-strict) mode. [`evaluate`] does
//! the same with an embedded QuickJS engine (the `rquickjs` crate).
//!
//! What each caller passes as `input`, as Conductor does:
//! - `DO_WHILE.loopCondition`: the task's resolved `inputParameters`, plus one entry per
//!   reference name: the loop task's own output under its ref (so
//!   `$.loop['iteration'] < 3` works) and each loop-body task's output under its ref.
//!   Use [`evaluate_condition`].
//! - `SWITCH` (javascript/graaljs) and `DECISION.caseExpression`: the task's resolved input.
//!   Conductor picks the case with `"" + result`; [`switch_case_key`] renders that string.
//! - `INLINE`: the task's resolved input (which also holds `evaluatorType` and `expression`);
//!   Conductor's task output is `{"result": <value>}`.
//!
//! Conductor's `evalBool` is not JavaScript truthiness: a boolean is itself, a number is true
//! when it is greater than 0, and anything else (strings, objects, null) is false.
//! [`evaluate_condition`] keeps exactly that rule.
//!
//! Conductor's GraalJS hands lists to a script as Java Lists, and scripts written for it call
//! their methods; arrays here answer `get(i)`, `size()`, `isEmpty()` and `contains(x)` too
//! (not enumerable).
//!
//! One leniency beyond Conductor: a script with a top-level `return` (as in Conductor's own
//! INLINE example, `if ($.a == 1) { return {x: true} } else { return {x: false} }`) is a syntax
//! error for a plain script, so it is run again wrapped in a function and its returned value is
//! the result. Scripts that Conductor accepts behave identically.
//!
//! # Sandbox and bounds
//!
//! Every evaluation gets a fresh QuickJS runtime and context, so no script can see or change
//! another one's state. The context holds only ECMAScript built-ins (no `std`/`os` modules, no
//! I/O, no timers, no module loader, no `performance`, no `WeakRef`/`FinalizationRegistry`).
//! [`Limits::steps`] and [`Limits::time`] are enforced by QuickJS's interrupt handler (polled
//! while the interpreter runs, about every 10,000 jumps and calls, regular expressions
//! included), which raises an uncatchable error past either. The steps (the handler's calls)
//! are the bound a script meets first: they count the work done, so a script stops at the
//! same point on every machine however busy it is. The time is a backstop for work the
//! steps see little of: a loop of heavy built-in calls (`JSON.stringify` in a loop) does
//! far more between two checks than an empty one. (A wall-clock bound alone failed correct
//! scripts whose thread the scheduler set aside under load.)
//! [`Limits::memory_bytes`] is QuickJS's allocator limit for the whole runtime (input, script
//! and result included). The native stack is bounded to [`MAX_STACK_BYTES`], so deep recursion
//! is a JavaScript `RangeError`, not a crashed process.
//!
//! # Determinism (DESIGN §3 invariant 4)
//!
//! Before the script runs, the built-ins that would make replay differ are neutralised:
//! - `Math.random()` throws an error saying it is unavailable (a seeded sequence would silently
//!   look random while repeating; an explicit failure is clearer).
//! - `Date.now()`, `Date()` called as a function and `new Date()` without arguments throw the
//!   same kind of error: they read the clock. `new Date(ms)`, `new Date(isoString)`,
//!   `Date.UTC(...)` and `Date.parse(...)` keep working.
//! - Local time is pinned to UTC regardless of the host's time zone: the local getters and
//!   setters (`getHours`, `setDate`, ...) are the UTC ones, `getTimezoneOffset()` is 0, the
//!   string forms (`toString`, `toLocaleString`, ...) are `toUTCString()`, `new Date(y, m, ...)`
//!   means `Date.UTC(y, m, ...)`, and ISO date-times without an offset are read as UTC.
//!
//! A timeout is the one outcome that depends on the machine (a script near the time bound may
//! finish on one host and not on another), so callers should record the outcome of an
//! evaluation in history rather than re-evaluate it on replay.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rquickjs::context::intrinsic;
use rquickjs::context::EvalOptions;
use rquickjs::{Coerced, Context, Ctx, Function, Object, Runtime, Value as JsValue};
use serde_json::Value;

/// Why the interrupt handler stopped a script: it did not.
const RUNNING: u8 = 0;
/// It reached [`Limits::steps`].
const OUT_OF_STEPS: u8 = 1;
/// It ran past [`Limits::time`].
const OUT_OF_TIME: u8 = 2;

/// Native stack QuickJS may use for one evaluation; deeper recursion raises a `RangeError`.
pub const MAX_STACK_BYTES: usize = 256 * 1024;

/// Bounds on one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Interrupt checks the script may reach (about 10,000 jumps and calls each) before it
    /// is stopped: the bound of the work it does, the same on every machine (default
    /// 5,000: an empty loop's 50 million iterations, about 0.1 s on a core).
    pub steps: u64,
    /// Wall-clock time the script may run before it is interrupted, a backstop for work
    /// the steps see little of, such as long built-in calls (default 1 s).
    pub time: Duration,
    /// Memory the whole JavaScript runtime may allocate, input and result included
    /// (default 16 MiB).
    pub memory_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            steps: 5_000,
            time: Duration::from_secs(1),
            memory_bytes: 16 * 1024 * 1024,
        }
    }
}

/// Why a script could not produce a value. Each message is a full sentence meant to be shown to
/// operators as a task or run failure reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// The script is not valid JavaScript.
    #[error("The script is not valid JavaScript: {message}.")]
    Syntax {
        /// The parser's message, e.g. `unexpected token in expression: ')'`.
        message: String,
    },
    /// The script threw an exception (or a built-in failed while it ran).
    #[error("The script threw an exception: {message}.")]
    Runtime {
        /// The exception as JavaScript shows it, e.g. `TypeError: cannot read property 'x' of undefined`.
        message: String,
    },
    /// The script ran longer than [`Limits::time`].
    #[error("The script did not finish within its time limit of {} ms and was stopped.", limit.as_millis())]
    Timeout {
        /// The time limit that was exceeded.
        limit: Duration,
    },
    /// The script did more work than [`Limits::steps`] allows.
    #[error("The script did not finish within its budget of {limit} steps and was stopped.")]
    StepLimit {
        /// The step budget that was exceeded.
        limit: u64,
    },
    /// The script (with its input) needed more than [`Limits::memory_bytes`].
    #[error("The script ran out of memory: it needed more than its limit of {limit_bytes} bytes.")]
    OutOfMemory {
        /// The memory limit that was exceeded.
        limit_bytes: usize,
    },
    /// The script produced a value that has no JSON form (a function, a symbol, a BigInt, a
    /// cyclic object, ...).
    #[error("The script's result cannot be turned into JSON: {message}.")]
    NotJson {
        /// What could not be converted.
        message: String,
    },
}

/// Evaluates `script` with `input` bound to `$` and returns the completion value of the script
/// as JSON, as Conductor's `ScriptEvaluator.eval` does. `undefined` becomes `null`, and so do
/// `NaN` and the infinities (JSON has no form for them).
pub fn evaluate(script: &str, input: &Value, limits: Limits) -> Result<Value, ScriptError> {
    let input_json = serde_json::to_string(input).map_err(|e| ScriptError::Runtime {
        message: format!("the input could not be serialised: {e}"),
    })?;
    let stopped = Arc::new(AtomicU8::new(RUNNING));
    let oom = ScriptError::OutOfMemory {
        limit_bytes: limits.memory_bytes,
    };

    let runtime = Runtime::new().map_err(|_| oom.clone())?;
    runtime.set_memory_limit(limits.memory_bytes);
    runtime.set_max_stack_size(MAX_STACK_BYTES);
    let deadline = Instant::now().checked_add(limits.time);
    let flag = Arc::clone(&stopped);
    let mut steps: u64 = 0;
    runtime.set_interrupt_handler(Some(Box::new(move || {
        steps += 1;
        let why = if steps > limits.steps {
            OUT_OF_STEPS
        } else if deadline.is_some_and(|d| Instant::now() >= d) {
            OUT_OF_TIME
        } else {
            return false;
        };
        flag.store(why, Ordering::Relaxed);
        true
    })));

    type Intrinsics = (
        intrinsic::Date,
        intrinsic::Eval,
        intrinsic::RegExpCompiler,
        intrinsic::RegExp,
        intrinsic::Json,
        intrinsic::Proxy,
        intrinsic::MapSet,
        intrinsic::TypedArrays,
        intrinsic::Promise,
    );
    let context = Context::custom::<Intrinsics>(&runtime).map_err(|_| oom.clone())?;

    let outcome = context.with(|ctx| run(&ctx, script, &input_json));
    let result = match (outcome, stopped.load(Ordering::Relaxed)) {
        (Ok(value), _) => Ok(value),
        (Err(_), OUT_OF_STEPS) => Err(ScriptError::StepLimit {
            limit: limits.steps,
        }),
        (Err(_), OUT_OF_TIME) => Err(ScriptError::Timeout { limit: limits.time }),
        (Err(Failure::OutOfMemory), _) => Err(oom),
        (Err(Failure::Script(e)), _) => Err(e),
    };
    drop(context);
    drop(runtime);
    result
}

/// Evaluates a condition (`loopCondition`, a javascript `caseExpression` used as a guard) and
/// turns the result into a boolean exactly as Conductor's `ScriptEvaluator.evalBool` does: a
/// boolean is itself, a number is `true` when greater than 0, anything else is `false`.
pub fn evaluate_condition(
    script: &str,
    input: &Value,
    limits: Limits,
) -> Result<bool, ScriptError> {
    evaluate(script, input, limits).map(|v| conductor_bool(&v))
}

/// Checks that `script` parses, without running it: the script becomes the body of a
/// function that is created but never called. Only a syntax error is reported.
pub fn check_syntax(script: &str) -> Result<(), ScriptError> {
    let wrapped = format!("(function () {{\n{script}\n}});\n0");
    match evaluate(
        &wrapped,
        &Value::Object(Default::default()),
        Limits::default(),
    ) {
        Err(e @ ScriptError::Syntax { .. }) => Err(e),
        _ => Ok(()),
    }
}

/// Conductor's `toBoolean`: booleans are themselves, numbers are `> 0`, the rest is `false`.
pub fn conductor_bool(value: &Value) -> bool {
    match value {
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f > 0.0),
        _ => false,
    }
}

/// The `decisionCases` key a SWITCH/DECISION result selects, as Conductor's `"" + result`: a
/// string is itself, `null` is `"null"`, booleans and numbers are their usual text (`2`, `2.5`).
/// Objects and arrays (which Conductor renders with Java's `toString`) are rendered as JSON.
pub fn switch_case_key(result: &Value) -> String {
    match result {
        Value::String(s) => s.clone(),
        Value::Null => "null".to_owned(),
        other => other.to_string(),
    }
}

/// The ways a run fails before it is classified (the timeout flag is checked first).
enum Failure {
    OutOfMemory,
    Script(ScriptError),
}

/// Makes the context deterministic and defines the helpers used after the user script ran.
/// Evaluates to the JSON replacer that refuses functions and symbols nested in a result.
const PRELUDE: &str = r#"(function (global) {
  'use strict';
  function unavailable(what) {
    return function () {
      throw new Error(what + ' is not available in Weft scripts, because a script must give ' +
        'the same result every time a workflow is replayed');
    };
  }
  function pin(obj, name, value) {
    Object.defineProperty(obj, name, { value: value, writable: false, enumerable: false, configurable: false });
  }
  pin(Math, 'random', unavailable('Math.random()'));

  var NativeDate = global.Date;
  var P = NativeDate.prototype;
  var localIso = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?$/;
  function asUtc(s) { return (typeof s === 'string' && localIso.test(s)) ? s + 'Z' : s; }
  var clock = unavailable('Reading the clock (Date.now(), Date() or new Date() without arguments)');
  function Date(year, month, day, hours, minutes, seconds, ms) {
    if (new.target === undefined || arguments.length === 0) { clock(); }
    if (arguments.length === 1) { return new NativeDate(asUtc(year)); }
    return new NativeDate(NativeDate.UTC.apply(undefined, arguments));
  }
  Date.prototype = P;
  pin(Date, 'now', clock);
  pin(Date, 'UTC', NativeDate.UTC);
  pin(Date, 'parse', function parse(s) { return NativeDate.parse(asUtc(String(s))); });
  Object.defineProperty(P, 'constructor', { value: Date, writable: true, enumerable: false, configurable: true });
  ['FullYear', 'Month', 'Date', 'Day', 'Hours', 'Minutes', 'Seconds', 'Milliseconds'].forEach(function (n) {
    pin(P, 'get' + n, P['getUTC' + n]);
    if (n !== 'Day') { pin(P, 'set' + n, P['setUTC' + n]); }
  });
  pin(P, 'getYear', function getYear() { return this.getUTCFullYear() - 1900; });
  pin(P, 'getTimezoneOffset', function getTimezoneOffset() { return isNaN(this.getTime()) ? NaN : 0; });
  ['toString', 'toDateString', 'toTimeString', 'toLocaleString', 'toLocaleDateString', 'toLocaleTimeString']
    .forEach(function (n) { pin(P, n, P.toUTCString); });
  Object.defineProperty(global, 'Date', { value: Date, writable: true, enumerable: false, configurable: true });

  // Conductor's GraalJS hands a script's lists over as Java Lists, and scripts written for
  // it call their methods (its own test harness: `$.list.get($.i - 1)`).
  var A = Array.prototype;
  pin(A, 'get', function get(i) { return this[i]; });
  pin(A, 'size', function size() { return this.length; });
  pin(A, 'isEmpty', function isEmpty() { return this.length === 0; });
  pin(A, 'contains', function contains(x) { return this.indexOf(x) !== -1; });

  return function (key, value) {
    var t = typeof value;
    if (t === 'function' || t === 'symbol') {
      throw new TypeError((key === '' ? 'the value' : 'property "' + key + '"') + ' is a ' + t);
    }
    return value;
  };
})(globalThis)"#;

/// Runs the prelude, binds `$`, evaluates the script and converts its value.
fn run(ctx: &Ctx<'_>, script: &str, input_json: &str) -> Result<Value, Failure> {
    let setup = |e: rquickjs::Error| classify(ctx, e, Phase::Setup, "");

    let replacer: Function = ctx.eval_with_options(PRELUDE, sloppy()).map_err(setup)?;
    // Kept before the script runs, so a script replacing `Function` cannot fool the
    // syntax-versus-runtime check below.
    let function_ctor: Function = ctx.globals().get("Function").map_err(setup)?;
    let input = ctx.json_parse(input_json).map_err(setup)?;
    ctx.globals().set("$", input).map_err(setup)?;

    let value: JsValue = match ctx.eval_with_options::<JsValue, _>(script, sloppy()) {
        Ok(v) => v,
        Err(rquickjs::Error::Exception) => {
            let exception = ctx.catch();
            match describe(ctx, &exception, script) {
                Thrown::OutOfMemory => return Err(Failure::OutOfMemory),
                Thrown::Error { name, message } if name == "SyntaxError" => {
                    // Parsing the script as a function body tells a parse error from a
                    // SyntaxError thrown while it ran (e.g. by `JSON.parse`).
                    let parses = function_ctor.call::<_, JsValue>((script,)).is_ok();
                    if !parses {
                        let body_error = match describe(ctx, &ctx.catch(), "") {
                            Thrown::Error { message, .. } => message,
                            _ => message.clone(),
                        };
                        let message = if message == "return not in a function" {
                            body_error
                        } else {
                            message
                        };
                        return Err(Failure::Script(ScriptError::Syntax { message }));
                    }
                    if message != "return not in a function" {
                        return Err(Failure::Script(ScriptError::Runtime {
                            message: format!("{name}: {message}"),
                        }));
                    }
                    // A top-level `return` (Conductor's INLINE examples use it): run the script
                    // as a function body. Nothing of the first attempt ran.
                    let wrapped = format!("(function () {{\n{script}\n}})()");
                    ctx.eval_with_options::<JsValue, _>(wrapped, sloppy())
                        .map_err(|e| classify(ctx, e, Phase::Script, script))?
                }
                Thrown::Error { name, message } => {
                    return Err(Failure::Script(ScriptError::Runtime {
                        message: join(&name, &message),
                    }))
                }
                Thrown::Other(text) => {
                    return Err(Failure::Script(ScriptError::Runtime { message: text }))
                }
            }
        }
        Err(e) => return Err(classify(ctx, e, Phase::Script, script)),
    };

    to_json(ctx, value, replacer, script)
}

/// Converts the script's completion value to JSON.
fn to_json<'js>(
    ctx: &Ctx<'js>,
    value: JsValue<'js>,
    replacer: Function<'js>,
    script: &str,
) -> Result<Value, Failure> {
    if value.is_undefined() {
        return Ok(Value::Null);
    }
    if value.is_function() || value.is_symbol() || value.is_big_int() {
        return Err(Failure::Script(ScriptError::NotJson {
            message: format!("the value is a {}", value.type_name().to_lowercase()),
        }));
    }
    let text = match ctx.json_stringify_replacer(value, replacer) {
        Ok(Some(s)) => s
            .to_string()
            .map_err(|e| classify(ctx, e, Phase::Convert, script))?,
        Ok(None) => return Ok(Value::Null),
        Err(e) => return Err(classify(ctx, e, Phase::Convert, script)),
    };
    serde_json::from_str(&text).map_err(|e| {
        Failure::Script(ScriptError::NotJson {
            message: format!("the engine's JSON could not be read back ({e})"),
        })
    })
}

/// Where an engine error happened, which decides how a thrown exception is reported.
#[derive(Clone, Copy)]
enum Phase {
    Setup,
    Script,
    Convert,
}

/// Turns an engine error into a failure, reading the pending exception if there is one.
fn classify(ctx: &Ctx<'_>, error: rquickjs::Error, phase: Phase, source: &str) -> Failure {
    let text = match error {
        rquickjs::Error::Allocation => return Failure::OutOfMemory,
        rquickjs::Error::Exception => match describe(ctx, &ctx.catch(), source) {
            Thrown::OutOfMemory => return Failure::OutOfMemory,
            Thrown::Error { name, message } => join(&name, &message),
            Thrown::Other(text) => text,
        },
        other => other.to_string(),
    };
    Failure::Script(match phase {
        Phase::Setup => ScriptError::Runtime {
            message: format!("the sandbox could not be prepared ({text})"),
        },
        Phase::Script => ScriptError::Runtime { message: text },
        Phase::Convert => ScriptError::NotJson { message: text },
    })
}

/// A thrown JavaScript value, described.
enum Thrown {
    OutOfMemory,
    Error { name: String, message: String },
    Other(String),
}

/// Describes a thrown value; `source` is the user code that may have thrown it.
fn describe<'js>(ctx: &Ctx<'js>, thrown: &JsValue<'js>, source: &str) -> Thrown {
    if thrown.is_null() && !source.contains("throw") {
        // When memory is so exhausted that QuickJS cannot even build its "out of memory"
        // error, it throws `null` instead. Only a `throw` statement can throw `null` otherwise,
        // so a script without one that threw `null` ran out of memory.
        return Thrown::OutOfMemory;
    }
    if let Some(obj) = thrown.as_object().filter(|o| o.is_error()) {
        let name = text_of(obj, "name").unwrap_or_else(|| "Error".to_owned());
        let message = text_of(obj, "message").unwrap_or_default();
        if name == "InternalError" && message == "out of memory" {
            return Thrown::OutOfMemory;
        }
        return Thrown::Error { name, message };
    }
    // Any other thrown value (`throw 'x'`, `throw {code: 1}`): its JSON, or its string form.
    let text = match ctx.json_stringify(thrown.clone()) {
        Ok(Some(s)) => s.to_string().ok(),
        _ => None,
    }
    .or_else(|| {
        let _ = ctx.catch();
        thrown.get::<Coerced<String>>().ok().map(|c| c.0)
    });
    let _ = ctx.catch();
    Thrown::Other(format!(
        "uncaught {}",
        text.unwrap_or_else(|| "value that could not be displayed".to_owned())
    ))
}

fn text_of(obj: &Object<'_>, key: &str) -> Option<String> {
    obj.get::<_, Option<Coerced<String>>>(key)
        .ok()
        .flatten()
        .map(|c| c.0)
}

fn join(name: &str, message: &str) -> String {
    if message.is_empty() {
        name.to_owned()
    } else {
        format!("{name}: {message}")
    }
}

/// Global code in sloppy mode, as Nashorn and GraalJS run Conductor scripts.
fn sloppy() -> EvalOptions {
    let mut options = EvalOptions::default();
    options.global = true;
    options.strict = false;
    options
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The default limits but the clock, which a loaded machine can run out of on a
    /// debug build where the test is not about time (those give their own limits).
    fn eval(script: &str, input: Value) -> Result<Value, ScriptError> {
        let limits = Limits {
            time: Duration::from_secs(60),
            ..Limits::default()
        };
        evaluate(script, &input, limits)
    }

    #[test]
    fn comparisons_and_arithmetic_over_dollar() {
        let input = json!({"value": 2, "a": 1, "s": "x", "nested": {"list": [1, 2, 3]}});
        assert_eq!(eval("$.value > 1", input.clone()), Ok(json!(true)));
        assert_eq!(eval("$.value < 1", input.clone()), Ok(json!(false)));
        assert_eq!(eval("$.a + 1", input.clone()), Ok(json!(2)));
        // JSON has one number type: an integral result reads back as an integer.
        assert_eq!(eval("$.value * 1.5", input.clone()), Ok(json!(3)));
        assert_eq!(eval("$.value / 4", input.clone()), Ok(json!(0.5)));
        assert_eq!(eval("$.s + $.a", input.clone()), Ok(json!("x1")));
        assert_eq!(
            eval("$.nested.list.length == 3 && $.s === 'x'", input.clone()),
            Ok(json!(true))
        );
        assert_eq!(
            eval("$.nested.list.map(x => x * 2)", input.clone()),
            Ok(json!([2, 4, 6]))
        );
        assert_eq!(eval("$.missing === undefined", input), Ok(json!(true)));
    }

    #[test]
    fn lists_answer_the_java_list_methods_scripts_written_for_conductor_call() {
        let input = json!({"list": [1, 2], "none": []});
        assert_eq!(eval("$.list.get(1)", input.clone()), Ok(json!(2)));
        assert_eq!(eval("$.list.size()", input.clone()), Ok(json!(2)));
        assert_eq!(eval("$.none.isEmpty()", input.clone()), Ok(json!(true)));
        assert_eq!(eval("$.list.contains(2)", input.clone()), Ok(json!(true)));
        assert_eq!(
            eval("Object.keys($.list).length", input.clone()),
            Ok(json!(2)),
            "the methods are not enumerable"
        );
        assert_eq!(eval("$.list.map(x => x)", input), Ok(json!([1, 2])));
    }

    #[test]
    fn string_results_for_switch() {
        let input = json!({"x": "a", "n": 2});
        let r = eval("if ($.x == 'a') 'yes'; else 'no';", input.clone());
        assert_eq!(r, Ok(json!("yes")));
        let r = eval("$.x == 'b' ? 'first' : 'second'", input.clone());
        assert_eq!(r, Ok(json!("second")));
        assert_eq!(switch_case_key(&json!("yes")), "yes");
        let n = eval("$.n + 1", input.clone());
        assert_eq!(n.as_ref().map(switch_case_key), Ok("3".to_owned()));
        assert_eq!(switch_case_key(&json!(2.5)), "2.5");
        assert_eq!(switch_case_key(&json!(true)), "true");
        assert_eq!(switch_case_key(&Value::Null), "null");
        // Conductor's own DECISION example style.
        let r = eval("$.x == 'a' ? 'LONG' : 'SHORT'", input);
        assert_eq!(r, Ok(json!("LONG")));
    }

    #[test]
    fn loop_conditions() {
        let mut input = json!({"limit": 3, "loop": {"iteration": 1}, "body": {"done": false}});
        assert_eq!(
            evaluate_condition("$.loop['iteration'] < 3", &input, Limits::default()),
            Ok(true)
        );
        assert_eq!(
            evaluate_condition(
                "$.loop['iteration'] < $.limit && !$.body.done",
                &input,
                Limits::default()
            ),
            Ok(true)
        );
        input["loop"]["iteration"] = json!(3);
        assert_eq!(
            evaluate_condition("$.loop['iteration'] < 3", &input, Limits::default()),
            Ok(false)
        );
        // Conductor's toBoolean: numbers > 0 are true, everything that is not a boolean or a
        // number is false (even a non-empty string, unlike JavaScript truthiness).
        let c = |s: &str| evaluate_condition(s, &input, Limits::default());
        assert_eq!(c("1"), Ok(true));
        assert_eq!(c("0"), Ok(false));
        assert_eq!(c("-1"), Ok(false));
        assert_eq!(c("'true'"), Ok(false));
        assert_eq!(c("({})"), Ok(false));
        assert_eq!(c("undefined"), Ok(false));
    }

    #[test]
    fn iife_and_top_level_return() {
        let input = json!({"a": 41, "input": {"a": 1}});
        assert_eq!(
            eval("(function(){ return $.a + 1; })()", input.clone()),
            Ok(json!(42))
        );
        assert_eq!(
            eval(
                "function e() { if ($.a > 1) { return {ok: true}; } return {ok: false}; } e();",
                input.clone()
            ),
            Ok(json!({"ok": true}))
        );
        assert_eq!(
            eval(
                "if ($.input.a==1){return {testvalue: true}} else{return {testvalue: false} }",
                input.clone()
            ),
            Ok(json!({"testvalue": true}))
        );
        assert_eq!(
            eval("(() => { const { a } = $; return `v${a}`; })()", input),
            Ok(json!("v41"))
        );
    }

    #[test]
    fn syntax_errors_are_reported_as_such() {
        match eval("$.a >", json!({})) {
            Err(ScriptError::Syntax { message }) => assert!(!message.is_empty()),
            other => panic!("expected a syntax error, got {other:?}"),
        }
        assert!(matches!(
            eval("if (", json!({})),
            Err(ScriptError::Syntax { .. })
        ));
        // A SyntaxError thrown while running is a runtime exception.
        match eval("JSON.parse('{')", json!({})) {
            Err(ScriptError::Runtime { message }) => {
                assert!(message.starts_with("SyntaxError"), "{message}")
            }
            other => panic!("expected a runtime error, got {other:?}"),
        }
        let msg = eval("$.a >", json!({})).unwrap_err().to_string();
        assert!(
            msg.starts_with("The script is not valid JavaScript: "),
            "{msg}"
        );
    }

    #[test]
    fn thrown_errors_carry_their_message() {
        match eval("throw new Error('boom')", json!({})) {
            Err(ScriptError::Runtime { message }) => assert_eq!(message, "Error: boom"),
            other => panic!("expected a runtime error, got {other:?}"),
        }
        match eval("$.a.b.c", json!({})) {
            Err(ScriptError::Runtime { message }) => {
                assert!(message.starts_with("TypeError"), "{message}")
            }
            other => panic!("expected a runtime error, got {other:?}"),
        }
        match eval("throw 'plain'", json!({})) {
            Err(ScriptError::Runtime { message }) => assert_eq!(message, "uncaught \"plain\""),
            other => panic!("expected a runtime error, got {other:?}"),
        }
        match eval("throw null", json!({})) {
            Err(ScriptError::Runtime { message }) => assert_eq!(message, "uncaught null"),
            other => panic!("expected a runtime error, got {other:?}"),
        }
        match eval("throw {code: 7}", json!({})) {
            Err(ScriptError::Runtime { message }) => assert_eq!(message, "uncaught {\"code\":7}"),
            other => panic!("expected a runtime error, got {other:?}"),
        }
        match eval("function f(n) { return f(n + 1) + 1; } f(0)", json!({})) {
            Err(ScriptError::Runtime { message }) => {
                assert!(message.starts_with("RangeError"), "{message}")
            }
            other => panic!("expected a stack overflow error, got {other:?}"),
        }
        let msg = eval("throw new TypeError('bad')", json!({}))
            .unwrap_err()
            .to_string();
        assert_eq!(msg, "The script threw an exception: TypeError: bad.");
    }

    /// The step budget stops a script at the same point on every machine, busy or not:
    /// an endless loop is stopped by it long before the time backstop, and a long but
    /// bounded loop under it finishes however slowly its thread runs.
    #[test]
    fn endless_loops_meet_the_step_budget_whatever_the_clock() {
        let limits = Limits {
            steps: 200,
            time: Duration::from_secs(600),
            ..Limits::default()
        };
        for script in [
            "while(true){}",
            "function f(){ while(true){} } f()",
            "/(a+)+b/.test('a'.repeat(40))",
        ] {
            match evaluate(script, &json!({}), limits) {
                Err(ScriptError::StepLimit { limit }) => assert_eq!(limit, 200),
                other => panic!("{script}: expected the step budget, got {other:?}"),
            }
        }
        let msg = evaluate("while(true){}", &json!({}), limits)
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "The script did not finish within its budget of 200 steps and was stopped."
        );
        let bounded = "let i = 0; while (i < 1000000) { i++ } i";
        assert_eq!(
            evaluate(bounded, &json!({}), Limits::default()),
            Ok(json!(1000000))
        );
    }

    #[test]
    fn endless_loops_time_out() {
        let limits = Limits {
            steps: u64::MAX,
            time: Duration::from_millis(50),
            ..Limits::default()
        };
        for script in [
            "while(true){}",
            "for(;;){ try { while(true){} } catch (e) {} }",
            "function f(){ while(true){} } f()",
            "/(a+)+b/.test('a'.repeat(40))",
        ] {
            match evaluate(script, &json!({}), limits) {
                Err(ScriptError::Timeout { limit }) => assert_eq!(limit, limits.time),
                other => panic!("{script}: expected a timeout, got {other:?}"),
            }
        }
        let msg = evaluate("while(true){}", &json!({}), limits)
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "The script did not finish within its time limit of 50 ms and was stopped."
        );
    }

    #[test]
    fn huge_allocations_hit_the_memory_limit() {
        let limits = Limits {
            time: Duration::from_secs(5),
            ..Limits::default()
        };
        for script in [
            "'x'.repeat(64 * 1024 * 1024)",
            "var a = []; for (var i = 0; i < 1e8; i++) a.push({i: i}); a.length",
            "(function () { var a = []; for (;;) a.push([a.length]); })()",
            "var s = ''; for (;;) s = s + 'ab' + s.length;",
            "new ArrayBuffer(1024 * 1024 * 1024)",
        ] {
            match evaluate(script, &json!({}), limits) {
                Err(ScriptError::OutOfMemory { limit_bytes }) => {
                    assert_eq!(limit_bytes, limits.memory_bytes)
                }
                // A failed huge ArrayBuffer allocation is reported by QuickJS as a RangeError.
                Err(ScriptError::Runtime { message }) if script.contains("ArrayBuffer") => {
                    assert!(
                        message.contains("RangeError") || message.contains("memory"),
                        "{message}"
                    )
                }
                other => panic!("{script}: expected out of memory, got {other:?}"),
            }
        }
        // An input larger than the limit is refused the same way.
        let big = json!({"s": "y".repeat(2 * 1024 * 1024)});
        let small = Limits {
            memory_bytes: 1024 * 1024,
            ..limits
        };
        assert!(matches!(
            evaluate("$.s.length", &big, small),
            Err(ScriptError::OutOfMemory { .. })
        ));
    }

    #[test]
    fn non_deterministic_built_ins_are_neutralised() {
        for script in [
            "Math.random()",
            "Date.now()",
            "new Date()",
            "Date()",
            "new Date().getTime()",
        ] {
            match eval(script, json!({})) {
                Err(ScriptError::Runtime { message }) => {
                    assert!(
                        message.contains("is not available in Weft scripts"),
                        "{script}: {message}"
                    )
                }
                other => panic!("{script}: expected an error, got {other:?}"),
            }
        }
        // A script cannot restore them: `Math.random` is read-only.
        assert!(eval(
            "Math.random = function () { return 4; }; Math.random()",
            json!({})
        )
        .is_err());
        // Dates from data keep working, in UTC whatever the host's zone.
        assert_eq!(
            eval("new Date(0).toISOString()", json!({})),
            Ok(json!("1970-01-01T00:00:00.000Z"))
        );
        assert_eq!(
            eval("new Date('2024-05-06T07:08:09').getHours()", json!({})),
            Ok(json!(7))
        );
        assert_eq!(
            eval(
                "new Date(2024, 0, 2).getTime() === Date.UTC(2024, 0, 2)",
                json!({})
            ),
            Ok(json!(true))
        );
        assert_eq!(
            eval("new Date(0).getTimezoneOffset()", json!({})),
            Ok(json!(0))
        );
        assert_eq!(
            eval("new Date(0) instanceof Date", json!({})),
            Ok(json!(true))
        );
        assert_eq!(
            eval("Date.parse('1970-01-01T00:00:01')", json!({})),
            Ok(json!(1000))
        );
        assert_eq!(
            eval("JSON.stringify({d: new Date(86400000)})", json!({})),
            Ok(json!("{\"d\":\"1970-01-02T00:00:00.000Z\"}"))
        );
        // No host APIs exist.
        for name in [
            "performance",
            "WeakRef",
            "FinalizationRegistry",
            "require",
            "std",
            "os",
            "fetch",
            "setTimeout",
        ] {
            assert_eq!(
                eval(&format!("typeof {name}"), json!({})),
                Ok(json!("undefined")),
                "{name}"
            );
        }
    }

    #[test]
    fn evaluations_do_not_leak_into_each_other() {
        assert_eq!(
            eval(
                "globalThis.leak = 1; Object.prototype.polluted = 2; 0",
                json!({})
            ),
            Ok(json!(0))
        );
        assert_eq!(
            eval("typeof leak + ' ' + typeof ({}).polluted", json!({})),
            Ok(json!("undefined undefined"))
        );
        assert!(eval("Math.random()", json!({})).is_err());
        // The input is a copy: mutating `$` changes nothing outside.
        let input = json!({"a": 1});
        assert_eq!(
            evaluate("$.a = 5; $.a", &input, Limits::default()),
            Ok(json!(5))
        );
        assert_eq!(input, json!({"a": 1}));
    }

    #[test]
    fn results_of_each_json_type() {
        let input = json!({"o": {"k": [1, "two", null, true]}});
        assert_eq!(eval("null", input.clone()), Ok(Value::Null));
        assert_eq!(eval("undefined", input.clone()), Ok(Value::Null));
        assert_eq!(eval("var x = 1;", input.clone()), Ok(Value::Null));
        assert_eq!(eval("true", input.clone()), Ok(json!(true)));
        assert_eq!(eval("7", input.clone()), Ok(json!(7)));
        assert_eq!(eval("-7.25", input.clone()), Ok(json!(-7.25)));
        assert_eq!(eval("'text'", input.clone()), Ok(json!("text")));
        assert_eq!(
            eval("[1, 'a', null]", input.clone()),
            Ok(json!([1, "a", null]))
        );
        assert_eq!(
            eval("({a: {b: [true]}})", input.clone()),
            Ok(json!({"a": {"b": [true]}}))
        );
        assert_eq!(eval("$.o", input.clone()), Ok(input["o"].clone()));
        assert_eq!(eval("$", input.clone()), Ok(input.clone()));
        assert_eq!(eval("NaN", input.clone()), Ok(Value::Null));
        assert_eq!(
            eval("9007199254740991", input.clone()),
            Ok(json!(9_007_199_254_740_991_u64))
        );
    }

    #[test]
    fn values_without_json_form_are_refused() {
        for script in [
            "(function () {})",
            "() => 1",
            "Symbol('s')",
            "10n",
            "({f: function () {}})",
            "var o = {}; o.self = o; o",
            "({toJSON: function () { throw new Error('no'); }})",
        ] {
            match eval(script, json!({})) {
                Err(e @ ScriptError::NotJson { .. }) => {
                    assert!(
                        e.to_string()
                            .starts_with("The script's result cannot be turned into JSON: "),
                        "{e}"
                    )
                }
                other => panic!("{script}: expected NotJson, got {other:?}"),
            }
        }
    }

    #[test]
    fn never_panics_on_odd_scripts() {
        for script in [
            "",
            ";",
            "\u{0}",
            "}",
            "'unterminated",
            "Function = null; JSON.parse('{')",
            "throw null",
            "throw undefined",
            "throw {toString: function () { while (true) {} }}",
            "Object.defineProperty(globalThis, '$', {value: 1})",
            "eval('1 +')",
            "new Proxy({}, {get: function () { throw 1; }})",
            "Promise.reject(new Error('x'))",
            "queueMicrotask(function () { while (true) {} }); 1",
            "JSON = null; ({a: 1})",
            "delete globalThis.Function; 1",
        ] {
            let _ = evaluate(
                script,
                &json!({}),
                Limits {
                    time: Duration::from_millis(50),
                    ..Limits::default()
                },
            );
        }
        assert_eq!(
            eval("JSON = null; ({a: 1})", json!({})),
            Ok(json!({"a": 1}))
        );
    }

    #[test]
    fn cost_of_a_thousand_evaluations() {
        let input = json!({"a": 2});
        let started = Instant::now();
        for _ in 0..1000 {
            assert_eq!(eval("$.a > 1", input.clone()), Ok(json!(true)));
        }
        eprintln!(
            "1,000 evaluations of `$.a > 1` (fresh runtime each) took {:?}",
            started.elapsed()
        );
    }
}

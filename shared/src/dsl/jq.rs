//! The jq sandbox behind Conductor's `JSON_JQ_TRANSFORM` task.
//!
//! # What Conductor does, and how Weft mirrors it
//!
//! Conductor's `JsonJqTransform` (module `json-jq-task`, on jackson-jq) applies the program in
//! `inputParameters.queryExpression` to the task's whole resolved input (the program itself
//! included) and completes with `result` (the first value the program yields, `null` when it
//! yields none) and `resultList` (every value). A program that does not compile, or that
//! fails while it runs, fails the task with the message as `reasonForIncompletion` and as
//! output `error`. [`evaluate`] runs the program with [jaq](https://github.com/01mf02/jaq)
//! (`jaq-core`, `jaq-std`, `jaq-json`) and returns every value; the caller shapes the output.
//! Messages are jaq's own wording, not jackson-jq's.
//!
//! # Sandbox and bounds
//!
//! jq programs can run forever (`repeat(1)`, `def f: f; f`, `last(range(infinite))`), recurse
//! without bound (`def f: 1 + f; f`) and build large values. jaq has no limits of its own, so:
//! - every evaluation runs on a thread of its own with a [`STACK_BYTES`] stack, and the
//!   interpreter is metered through the one hook it calls for every term it evaluates (the
//!   lookup of the compiled program): each call costs one step of [`Limits::steps`], checks
//!   the clock against [`Limits::time`] and checks how much of the stack is used. `range`,
//!   the one built-in that yields values without evaluating terms, costs a step per value.
//!   Past a bound the evaluation is unwound (a private panic payload, caught at the thread's
//!   join and kept out of the panic log) and the task fails with the bound's name. This
//!   needs unwinding: no profile of the workspace may set `panic = "abort"`;
//! - at most [`Limits::outputs`] values are taken from the program;
//! - the program text is at most [`MAX_QUERY_BYTES`] long, so parsing it (recursive in jaq)
//!   fits in the thread's stack, and results nest at most [`MAX_RESULT_DEPTH`] levels, so
//!   they can be stored and read back as JSON.
//!
//! What remains unbounded is memory taken by a single built-in operation that allocates its
//! whole result at once (`"x" * 1e12`, `.[1e12] = 1`): that can exhaust the decider's memory.
//! Values that grow step by step (`. + .` in a loop) are stopped by the clock after roughly
//! what can be allocated within [`Limits::time`].
//!
//! # Determinism (DESIGN §3 invariant 4)
//!
//! The built-ins that read the host are replaced: `env`, `$ENV`-style access through `env`,
//! `now` and `halt` fail with a message saying they are unavailable; `localtime` and
//! `strflocaltime` are `gmtime` and `strftime` (UTC, whatever the host's zone). Modules
//! (`include`, `import`) are not loaded. A time-out is the one outcome that depends on the
//! machine, so callers record the outcome of an evaluation rather than evaluate again on
//! replay.

use std::cell::Cell;
use std::sync::Once;
use std::time::{Duration, Instant};

use jaq_core::data::{DataT, HasLut};
use jaq_core::load::{self, Arena, File, Loader};
use jaq_core::native::{bome, v, Fun};
use jaq_core::{Compiler, Ctx, Error, Exn, Native, ValX, Vars};
use jaq_json::Val;
use serde_json::{Map, Number, Value};

/// Longest program accepted, in bytes: jaq parses recursively, and a longer program could
/// nest deeper than [`STACK_BYTES`] allows (measured on debug builds, the deepest).
pub const MAX_QUERY_BYTES: usize = 16 * 1024;

/// Deepest nesting of arrays and objects in a result: what stored JSON is read back with
/// (serde_json's limit is 128, and a task's output sits a few levels deep in its event).
pub const MAX_RESULT_DEPTH: usize = 100;

/// Stack of the thread that compiles and runs one program. Only what is used is committed.
pub const STACK_BYTES: usize = 256 * 1024 * 1024;

/// Stack a running program may use; the rest is left for unwinding and dropping values.
const STACK_BUDGET: usize = 192 * 1024 * 1024;

/// Bounds on one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time the program may run (default 250 ms).
    pub time: Duration,
    /// Terms the interpreter may evaluate, and values `range` may yield (default 5,000,000).
    pub steps: u64,
    /// Values the program may yield (default 10,000).
    pub outputs: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            time: Duration::from_millis(250),
            steps: 5_000_000,
            outputs: 10_000,
        }
    }
}

/// Why a program gave no values. Each message is meant to be shown to operators as the
/// task's `reasonForIncompletion` and its `error` output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JqError {
    /// The program is longer than [`MAX_QUERY_BYTES`].
    #[error("the jq program is {len} bytes long; at most {MAX_QUERY_BYTES} are accepted")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The program does not parse or names something undefined.
    #[error("the jq program does not compile: {message}")]
    Compile {
        /// jaq's message with the line and column, e.g. `expected term, found ")" at line 1, column 4`.
        message: String,
    },
    /// The program failed while it ran (`error(...)`, a type error, ...).
    #[error("{message}")]
    Runtime {
        /// jaq's message; a string passed to `error` is shown as is.
        message: String,
    },
    /// The program ran longer than [`Limits::time`].
    #[error("the jq program did not finish within its time limit of {} ms and was stopped", limit.as_millis())]
    Timeout {
        /// The time limit.
        limit: Duration,
    },
    /// The program evaluated more than [`Limits::steps`] terms.
    #[error("the jq program took more than {limit} steps and was stopped")]
    TooManySteps {
        /// The step limit.
        limit: u64,
    },
    /// The program recursed deeper than its stack allows.
    #[error("the jq program recursed too deeply and was stopped")]
    TooDeep,
    /// The program yielded more than [`Limits::outputs`] values.
    #[error("the jq program yielded more than {limit} values")]
    TooManyOutputs {
        /// The output limit.
        limit: usize,
    },
    /// A result nests deeper than [`MAX_RESULT_DEPTH`].
    #[error("a result of the jq program nests deeper than {MAX_RESULT_DEPTH} levels")]
    TooNested,
}

/// Compiles `query` without running it, as registration checks it.
pub fn check(query: &str) -> Result<(), JqError> {
    on_sandbox_thread(Limits::default(), || compile(query).map(|_| ()))
}

/// Runs `query` on `input` and returns every value it yields, in order.
pub fn evaluate(query: &str, input: &Value, limits: Limits) -> Result<Vec<Value>, JqError> {
    on_sandbox_thread(limits, || {
        let filter = compile(query)?;
        run(&filter, input, limits)
    })
}

/// The data the metered interpreter carries: the compiled program and the budget.
struct Sandbox;

impl DataT for Sandbox {
    type V<'a> = Val;
    type Data<'a> = Meter<'a>;
}

#[derive(Clone)]
struct Meter<'a> {
    lut: &'a jaq_core::Lut<Sandbox>,
    budget: &'a Budget,
}

impl<'a> HasLut<'a, Sandbox> for Meter<'a> {
    // jaq looks the program up for every term it evaluates: the one place to meter it.
    fn lut(&self) -> &'a jaq_core::Lut<Sandbox> {
        self.budget.charge();
        self.lut
    }
}

/// What one evaluation may still spend.
struct Budget {
    steps: Cell<u64>,
    limits: Limits,
    deadline: Instant,
    stack_base: usize,
}

/// The panic payload that unwinds an evaluation past a bound.
enum Exceeded {
    Steps,
    Time,
    Stack,
}

impl Budget {
    fn new(limits: Limits) -> Self {
        Budget {
            steps: Cell::new(0),
            limits,
            deadline: Instant::now() + limits.time,
            stack_base: stack_address(),
        }
    }

    fn charge(&self) {
        let steps = self.steps.get() + 1;
        self.steps.set(steps);
        if steps > self.limits.steps {
            std::panic::panic_any(Exceeded::Steps);
        }
        if Instant::now() > self.deadline {
            std::panic::panic_any(Exceeded::Time);
        }
        if self.stack_base.abs_diff(stack_address()) > STACK_BUDGET {
            std::panic::panic_any(Exceeded::Stack);
        }
    }
}

/// Where the stack is now (an address, compared, never dereferenced).
fn stack_address() -> usize {
    let marker = 0u8;
    std::ptr::addr_of!(marker) as usize
}

/// Runs `f` on a thread with a [`STACK_BYTES`] stack; a bound's unwinding becomes its error.
fn on_sandbox_thread<T: Send>(
    limits: Limits,
    f: impl FnOnce() -> Result<T, JqError> + Send,
) -> Result<T, JqError> {
    silence_budget_panics();
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("weft-jq".into())
            .stack_size(STACK_BYTES)
            .spawn_scoped(scope, f)
            .map_err(|e| JqError::Runtime {
                message: format!("the jq sandbox could not start: {e}"),
            })?;
        handle.join().unwrap_or_else(|payload| {
            Err(match payload.downcast_ref::<Exceeded>() {
                Some(Exceeded::Steps) => JqError::TooManySteps {
                    limit: limits.steps,
                },
                Some(Exceeded::Time) => JqError::Timeout { limit: limits.time },
                Some(Exceeded::Stack) => JqError::TooDeep,
                None => JqError::Runtime {
                    message: format!("the jq interpreter failed: {}", panic_message(&*payload)),
                },
            })
        })
    })
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned())
}

/// Keeps the unwinding of a bound out of the panic log (it is an expected outcome, reported
/// as the task's failure); every other panic still goes to the hook installed before.
fn silence_budget_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<Exceeded>().is_none() {
                previous(info);
            }
        }));
    });
}

type Filter = jaq_core::Filter<Sandbox>;

/// Definitions added after jaq's own: host-independent stand-ins for the local-time ones.
const DEFS: &str = "def localtime: gmtime; def strflocaltime($fmt): strftime($fmt);";

/// Built-ins replaced by [`natives`]; the local-time ones by [`DEFS`].
const REPLACED: [&str; 6] = ["range", "env", "now", "halt", "localtime", "strflocaltime"];

fn compile(query: &str) -> Result<Filter, JqError> {
    if query.len() > MAX_QUERY_BYTES {
        return Err(JqError::TooLong { len: query.len() });
    }
    let extra = load::parse(DEFS, |p| p.defs()).unwrap_or_default();
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs())
        .chain(extra)
        .map(shorten);
    let funs = jaq_core::funs::<Sandbox>()
        .chain(jaq_std::funs())
        .chain(jaq_json::funs())
        .filter(|(name, _, _)| !REPLACED.contains(name))
        .chain(natives());
    let arena = Arena::default();
    let program = File {
        code: query,
        path: (),
    };
    let modules = Loader::new(defs)
        .load(&arena, program)
        .map_err(|errors| compile_error(query, load_messages(query, errors)))?;
    Compiler::default()
        .with_funs(funs)
        .compile(modules)
        .map_err(|errors| {
            let messages = errors
                .into_iter()
                .flat_map(|(_, errors)| errors)
                .map(|(name, undefined)| {
                    let what = match undefined {
                        jaq_core::compile::Undefined::Filter(arity) => {
                            format!("undefined filter {name}/{arity}")
                        }
                        other => format!("undefined {} {name}", other.as_str()),
                    };
                    at(query, name, what)
                })
                .collect();
            compile_error(query, messages)
        })
}

/// jaq's definitions borrow `'static` text; the loader wants the program's lifetime.
fn shorten<'s>(def: load::parse::Def<&'static str>) -> load::parse::Def<&'s str> {
    def
}

fn compile_error(query: &str, messages: Vec<String>) -> JqError {
    let message = if messages.is_empty() {
        format!("{query:?} is not a jq program")
    } else {
        messages.join("; ")
    };
    JqError::Compile { message }
}

fn load_messages(query: &str, errors: load::Errors<&str, ()>) -> Vec<String> {
    let mut out = Vec::new();
    for (_, error) in errors {
        match error {
            load::Error::Io(errors) => {
                out.extend(errors.into_iter().map(|(path, why)| {
                    at(query, path, format!("cannot load module {path:?}: {why}"))
                }))
            }
            load::Error::Lex(errors) => out.extend(errors.into_iter().map(|(expect, part)| {
                use load::lex::Expect;
                let what = match expect {
                    Expect::Delim(open) => {
                        return at(query, open, format!("{open:?} is never closed"));
                    }
                    other => format!("expected {}", other.as_str()),
                };
                at(query, part, what)
            })),
            load::Error::Parse(errors) => out.extend(errors.into_iter().map(|(expect, found)| {
                let found_text = if found.is_empty() {
                    "the end of the program".to_owned()
                } else {
                    format!("{:?}", found.chars().take(20).collect::<String>())
                };
                at(
                    query,
                    found,
                    format!("expected {}, found {found_text}", expect.as_str()),
                )
            })),
        }
    }
    out
}

/// `what`, followed by the line and column where `part` (a slice of `query`) starts.
fn at(query: &str, part: &str, what: String) -> String {
    let base = query.as_ptr() as usize;
    let start = part.as_ptr() as usize;
    if start < base || start > base + query.len() {
        return what;
    }
    let before = &query[..start - base];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    format!("{what} at line {line}, column {column}")
}

/// The built-ins Weft provides itself: a metered `range`, and the ones that would read the
/// host (or end the process) as errors.
fn natives() -> impl Iterator<Item = Fun<Sandbox>> {
    fn unavailable<'a>(name: &str) -> jaq_core::ValXs<'a, Val> {
        bome(Err(Error::str(format!(
            "{name} is not available in JSON_JQ_TRANSFORM (programs must not depend on the host)"
        ))))
    }
    let range: Fun<Sandbox> = (
        "range",
        v(3),
        Native::new(|mut cv| {
            let by = cv.0.pop_var();
            let to = cv.0.pop_var();
            let from = cv.0.pop_var();
            let budget = cv.0.data().budget;
            Box::new(range(Ok(from), to, by).inspect(move |_| budget.charge()))
        }),
    );
    [
        range,
        ("env", v(0), Native::new(|_| unavailable("env"))),
        ("now", v(0), Native::new(|_| unavailable("now"))),
        ("halt", v(1), Native::new(|_| unavailable("halt"))),
    ]
    .into_iter()
}

/// jaq-core's `range($from; $upto; $by)` (MIT), which Weft meters per value.
fn range<'a>(mut from: ValX<'a, Val>, to: Val, by: Val) -> impl Iterator<Item = ValX<'a, Val>> {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let cmp = by.partial_cmp(&Val::from(0isize)).unwrap_or(Equal);
    std::iter::from_fn(move || match from.clone() {
        Ok(x) => match cmp {
            Greater => x < to,
            Less => x > to,
            Equal => x != to,
        }
        .then(|| std::mem::replace(&mut from, (x + by.clone()).map_err(Exn::from))),
        e @ Err(_) => {
            from = Ok(to.clone());
            Some(e)
        }
    })
}

fn run(filter: &Filter, input: &Value, limits: Limits) -> Result<Vec<Value>, JqError> {
    let budget = Budget::new(limits);
    let meter = Meter {
        lut: &filter.lut,
        budget: &budget,
    };
    let ctx = Ctx::<Sandbox>::new(meter, Vars::new([]));
    let mut values = Vec::new();
    for item in filter.id.run((ctx, to_val(input))) {
        let value = item.map_err(|exn| runtime_error(exn))?;
        if values.len() == limits.outputs {
            return Err(JqError::TooManyOutputs {
                limit: limits.outputs,
            });
        }
        values.push(from_val(&value, 0)?);
    }
    Ok(values)
}

fn runtime_error(exn: Exn<'_, Val>) -> JqError {
    let message = match exn.get_err() {
        Ok(error) => match error.into_val() {
            // `error("text")` reads as the text, as jq prints it.
            Val::TStr(s) | Val::BStr(s) => String::from_utf8_lossy(&s).into_owned(),
            other => format!("{other} (not a string)"),
        },
        // `halt` is replaced; nothing else escapes a main filter.
        Err(_) => "the jq program stopped early".to_owned(),
    };
    JqError::Runtime { message }
}

/// The task's input as a jq value.
fn to_val(value: &Value) -> Val {
    match value {
        Value::Null => Val::Null,
        Value::Bool(b) => Val::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Val::Num(jaq_json::Num::from_integral(i)),
            (None, Some(u)) => Val::Num(jaq_json::Num::from_integral(u)),
            _ => Val::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Val::from(s.clone()),
        Value::Array(items) => items.iter().map(to_val).collect(),
        Value::Object(map) => Val::obj(
            map.iter()
                .map(|(k, v)| (Val::from(k.clone()), to_val(v)))
                .collect(),
        ),
    }
}

/// A jq value as JSON, as Conductor's `extractBody` gives it: integers stay integers,
/// other numbers are doubles (NaN is null, the infinities the largest doubles, as jq
/// prints them).
fn from_val(value: &Val, depth: usize) -> Result<Value, JqError> {
    if depth > MAX_RESULT_DEPTH {
        return Err(JqError::TooNested);
    }
    Ok(match value {
        Val::Null => Value::Null,
        Val::Bool(b) => Value::Bool(*b),
        Val::Num(n) => number(n),
        Val::TStr(s) | Val::BStr(s) => Value::String(String::from_utf8_lossy(s).into_owned()),
        Val::Arr(items) => Value::Array(
            items
                .iter()
                .map(|item| from_val(item, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        Val::Obj(map) => {
            let mut out = Map::with_capacity(map.len());
            for (k, v) in map.iter() {
                let key = match k {
                    Val::TStr(s) | Val::BStr(s) => String::from_utf8_lossy(s).into_owned(),
                    other => other.to_string(),
                };
                out.insert(key, from_val(v, depth + 1)?);
            }
            Value::Object(out)
        }
    })
}

fn number(n: &jaq_json::Num) -> Value {
    use jaq_json::Num;
    let float = |f: f64| {
        let f = if f.is_infinite() {
            f64::MAX.copysign(f)
        } else {
            f
        };
        Number::from_f64(f).map_or(Value::Null, Value::Number)
    };
    match n {
        Num::Int(i) => Value::Number(Number::from(*i)),
        Num::BigInt(_) | Num::Dec(_) => {
            let text = n.to_string();
            match serde_json::from_str::<Number>(&text) {
                Ok(parsed) if parsed.is_i64() || parsed.is_u64() => Value::Number(parsed),
                _ => float(text.parse::<f64>().unwrap_or(f64::NAN)),
            }
        }
        Num::Float(f) => float(*f),
    }
}

#[cfg(test)]
mod tests;

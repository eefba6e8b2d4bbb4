// SPDX-License-Identifier: GPL-2.0

//! Shared pieces of the rmlx5 tools: argument parsing, device selection
//! (kernel devices, or `--model` for the in-process software HCA), fixed
//! point formatting (the workspace forbids float arithmetic), rmlx5-perf's
//! result lines ([`report`]) and its two-process server/client mode
//! ([`remote`]).

use std::collections::HashMap;

use rmlx5::{Device, SoftFabric};

pub mod remote;
pub mod report;

/// Parsed `--key value` and `--flag` arguments.
#[derive(Debug, Default)]
pub struct Args {
    values: HashMap<String, String>,
}

impl Args {
    /// Parses the process arguments; `flags` lists the options that take
    /// no value.
    ///
    /// # Errors
    ///
    /// A message for an option missing its value.
    pub fn parse(flags: &[&str]) -> Result<Args, String> {
        let mut values = HashMap::new();
        let mut it = std::env::args().skip(1);
        while let Some(a) = it.next() {
            let key = a
                .strip_prefix("--")
                .ok_or_else(|| format!("unexpected argument {}", a))?
                .to_string();
            if flags.contains(&key.as_str()) {
                values.insert(key, String::new());
            } else {
                let v = it
                    .next()
                    .ok_or_else(|| format!("--{} needs a value", key))?;
                values.insert(key, v);
            }
        }
        Ok(Args { values })
    }

    /// Whether `--name` was given.
    pub fn flag(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    /// `--name N`, or `default`.
    ///
    /// # Errors
    ///
    /// A message if the value is not a number.
    pub fn num(&self, name: &str, default: u64) -> Result<u64, String> {
        match self.values.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("--{}: not a number: {}", name, v)),
        }
    }

    /// `--name S`, or `default`.
    pub fn str(&self, name: &str, default: &str) -> String {
        self.values
            .get(name)
            .cloned()
            .unwrap_or_else(|| default.to_string())
    }
}

/// The devices to use: the kernel's, or with `model` two in-process
/// software HCAs.
///
/// # Errors
///
/// A message if there is none.
pub fn devices(model: bool) -> Result<Vec<Device>, String> {
    let d = if model {
        SoftFabric::new(2).map_err(|e| e.to_string())?.devices()
    } else {
        rmlx5::devices().map_err(|e| e.to_string())?
    };
    if d.is_empty() {
        return Err(
            "no rmlx5 device (is rmlx5.ko loaded? --model runs the in-process software HCA)".into(),
        );
    }
    Ok(d)
}

/// Device `index` of `devs`.
///
/// # Errors
///
/// A message if it does not exist.
pub fn pick(devs: &[Device], index: u64) -> Result<Device, String> {
    devs.iter()
        .find(|d| u64::from(d.index()) == index)
        .cloned()
        .ok_or_else(|| format!("no device rmlx5_{}", index))
}

/// `n / d` with three decimals, as text (no floats).
pub fn fixed3(n: u128, d: u128) -> String {
    if d == 0 {
        return "0.000".into();
    }
    let milli = n * 1000 / d;
    format!("{}.{:03}", milli / 1000, milli % 1000)
}

/// Nanoseconds as microseconds with two decimals.
pub fn usec(ns: u128) -> String {
    format!("{}.{:02}", ns / 1000, (ns % 1000) / 10)
}

/// One end of a tool's connection.
#[derive(Debug)]
pub struct End {
    /// Context.
    pub ctx: rmlx5::Context,
    /// Completion channel (event mode).
    pub channel: Option<rmlx5::CompChannel>,
    /// CQ for sends and receives.
    pub cq: rmlx5::Cq,
    /// The QP.
    pub qp: rmlx5::Qp,
    /// Buffer.
    pub mr: rmlx5::Mr,
}

/// Opens `dev`, creates a CQ (with a channel if `events`), an RC QP and an
/// MR of `mr_len` bytes.
///
/// # Errors
///
/// The failing verb, as text.
pub fn end(dev: &Device, events: bool, mr_len: usize, init: &rmlx5::QpInit) -> Result<End, String> {
    let e = |what: &str, err: rmlx5::Error| format!("{}: {}: {}", dev.name(), what, err);
    let ctx = dev.open().map_err(|x| e("open", x))?;
    let pd = ctx.alloc_pd().map_err(|x| e("alloc_pd", x))?;
    let channel = if events {
        Some(
            ctx.create_comp_channel()
                .map_err(|x| e("create_comp_channel", x))?,
        )
    } else {
        None
    };
    let depth = init.max_send_wr + init.max_recv_wr + 1;
    let cq = ctx
        .create_cq(depth, channel.as_ref())
        .map_err(|x| e("create_cq", x))?;
    let qp = pd
        .create_qp(&cq, &cq, init)
        .map_err(|x| e("create_qp", x))?;
    let mr = pd
        .reg_mr(mr_len.max(64), rmlx5::Access::ALL)
        .map_err(|x| e("reg_mr", x))?;
    Ok(End {
        ctx,
        channel,
        cq,
        qp,
        mr,
    })
}

/// Connects two ends to each other.
///
/// # Errors
///
/// The failing modify, as text.
pub fn connect(a: &End, b: &End) -> Result<(), String> {
    let o = rmlx5::ConnectOpts::default();
    a.qp.connect(&b.qp.endpoint(), &o)
        .map_err(|e| format!("connect: {}", e))?;
    if a.qp.qpn() != b.qp.qpn() || a.ctx.lid() != b.ctx.lid() {
        b.qp.connect(&a.qp.endpoint(), &o)
            .map_err(|e| format!("connect: {}", e))?;
    }
    Ok(())
}

/// Waits for completions on `end`'s CQ: busy polling, or in event mode the
/// ibv_rc_pingpong loop: wait for the completion event first, ack it,
/// re-arm, then poll. A completion that arrived before the re-arm is found
/// by that poll, and any completion after it raises the next event, so no
/// completion is missed; an event whose completions an earlier poll already
/// took just leads to another wait.
///
/// # Errors
///
/// A failed verb or an error completion, as text.
pub fn wait_one(end: &End, out: &mut Vec<rmlx5::Wc>) -> Result<(), String> {
    let mut wc = [rmlx5::Wc::default(); 16];
    loop {
        if let Some(ch) = &end.channel {
            let cq = ch.get_cq_event().map_err(|e| e.to_string())?;
            cq.ack_events(1);
            cq.req_notify(false).map_err(|e| e.to_string())?;
        }
        loop {
            let n = end.cq.poll(&mut wc).map_err(|e| e.to_string())?;
            for w in &wc[..n] {
                if !w.is_ok() {
                    return Err(format!(
                        "completion wr_id {} failed: {} (vendor {:#x})",
                        w.wr_id,
                        w.status.as_str(),
                        w.vendor_err
                    ));
                }
                out.push(*w);
            }
            if n < wc.len() {
                break;
            }
        }
        if !out.is_empty() {
            return Ok(());
        }
    }
}

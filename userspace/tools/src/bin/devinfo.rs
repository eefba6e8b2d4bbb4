// SPDX-License-Identifier: GPL-2.0

//! rmlx5-devinfo: device and port attributes, laid out like ibv_devinfo.
//!
//! Usage: `rmlx5-devinfo [--device N] [--verbose] [--model] [--list]`.
//!
//! After the HCAs it lists the ConnectX PCI functions rmlx5's PCI backend
//! has brought up (debugfs `rmlx5/pci`, so as root).

use rmlx5_abi_view::*;

mod rmlx5_abi_view {
    pub(crate) use rmlx5::{Context, DeviceAttr, PortAttr};
}

fn mtu(v: u32) -> u32 {
    128 << v.min(5)
}

fn print(ctx: &Context, verbose: bool) -> Result<(), String> {
    let d: DeviceAttr = ctx.query_device().map_err(|e| e.to_string())?;
    let g = d.node_guid;
    let guid = format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        g >> 48,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    );
    println!("hca_id:\t{}", ctx.name());
    println!("\ttransport:\t\t\tInfiniBand (0)");
    println!(
        "\tfw_ver:\t\t\t\t{}.{}.{}",
        d.fw_ver >> 32,
        (d.fw_ver >> 16) & 0xffff,
        d.fw_ver & 0xffff
    );
    println!("\tnode_guid:\t\t\t{}", guid);
    println!("\tsys_image_guid:\t\t\t{:016x}", d.sys_image_guid);
    println!("\tvendor_id:\t\t\t0x{:04x}", d.vendor_id);
    println!("\tvendor_part_id:\t\t\t{}", d.vendor_part_id);
    println!("\thw_ver:\t\t\t\t0x{:x}", d.hw_ver);
    println!("\tphys_port_cnt:\t\t\t{}", d.phys_port_cnt);
    if verbose {
        println!("\tmax_mr_size:\t\t\t0x{:x}", d.max_mr_size);
        println!("\tpage_size_cap:\t\t\t0x{:x}", d.page_size_cap);
        println!("\tmax_qp:\t\t\t\t{}", d.max_qp);
        println!("\tmax_qp_wr:\t\t\t{}", d.max_qp_wr);
        println!("\tmax_sge:\t\t\t{}", d.max_sge);
        println!("\tmax_cq:\t\t\t\t{}", d.max_cq);
        println!("\tmax_cqe:\t\t\t{}", d.max_cqe);
        println!("\tmax_mr:\t\t\t\t{}", d.max_mr);
        println!("\tmax_pd:\t\t\t\t{}", d.max_pd);
        println!("\tmax_qp_rd_atom:\t\t\t{}", d.max_qp_rd_atom);
        println!("\tmax_qp_init_rd_atom:\t\t{}", d.max_qp_init_rd_atom);
        println!("\tatomic_cap:\t\t\tATOMIC_HCA ({})", d.atomic_cap);
        println!("\tnum_comp_vectors:\t\t{}", d.num_comp_vectors);
        println!("\tmax_inline_data:\t\t{}", d.max_inline_data);
        println!("\tbf_reg_size:\t\t\t{}", d.bf_reg_size);
    }
    for port in 1..=d.phys_port_cnt {
        let p: PortAttr = ctx.query_port(port).map_err(|e| e.to_string())?;
        let state = if p.state == 4 {
            "PORT_ACTIVE"
        } else {
            "PORT_DOWN"
        };
        println!("\t\tport:\t{}", port);
        println!("\t\t\tstate:\t\t\t{} ({})", state, p.state);
        println!("\t\t\tmax_mtu:\t\t{} ({})", mtu(p.max_mtu), p.max_mtu);
        println!(
            "\t\t\tactive_mtu:\t\t{} ({})",
            mtu(p.active_mtu),
            p.active_mtu
        );
        println!("\t\t\tsm_lid:\t\t\t{}", p.sm_lid);
        println!("\t\t\tport_lid:\t\t{}", p.lid);
        println!("\t\t\tport_lmc:\t\t0x00");
        println!("\t\t\tlink_layer:\t\tInfiniBand");
        if verbose {
            println!("\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len);
            println!("\t\t\tactive_width:\t\t{}", p.active_width);
            println!("\t\t\tactive_speed:\t\t{}", p.active_speed);
        }
    }
    println!();
    Ok(())
}

/// The ConnectX PCI functions rmlx5's PCI backend has up, one line each
/// (debugfs `rmlx5/pci`, root only): none without debugfs, without the
/// module, or without functions.
fn pci_functions() -> Vec<String> {
    std::fs::read_to_string("/sys/kernel/debug/rmlx5/pci")
        .map(|s| s.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The verbs device a PCI function line names (`verbs rmlx5_<n>`), if any.
fn verbs_device(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w == "verbs" {
            return words.next().filter(|d| d.starts_with("rmlx5_"));
        }
    }
    None
}

/// Prints the PCI functions after the HCAs: each is up (command
/// interface, pages, EQs) and, once attached, the verbs device it names
/// for kernel ULPs (user space reaches only the software HCAs' nodes).
fn print_pci(list: bool) {
    let f = pci_functions();
    if f.is_empty() {
        return;
    }
    if list {
        println!(
            "    {} ConnectX PCI function{} up:",
            f.len(),
            if f.len() == 1 { "" } else { "s" }
        );
        for l in &f {
            println!("	{l}");
        }
        return;
    }
    for l in &f {
        let (name, rest) = l.split_once(' ').unwrap_or((l.as_str(), ""));
        println!("pci_function:	{name}");
        println!("	{rest}");
        match verbs_device(l) {
            Some(d) => {
                let node = d
                    .strip_prefix("rmlx5_")
                    .map(|n| format!("/dev/rmlx5_uverbs{n}"))
                    .filter(|p| std::path::Path::new(p).exists());
                match node {
                    Some(p) => println!(
                        "	(up through the mlx5 command interface; verbs device {d}, user space through {p})"
                    ),
                    None => println!(
                        "	(up through the mlx5 command interface; verbs device {d}, no uverbs node)"
                    ),
                }
            }
            None => println!("	(up through the mlx5 command interface; not a verbs device)"),
        }
        println!();
    }
}

fn run() -> Result<(), String> {
    let args = rmlx5_tools::Args::parse(&["verbose", "model", "list"])?;
    let devs = rmlx5_tools::devices(args.flag("model"))?;
    if args.flag("list") {
        println!(
            "    {} HCA{} found:",
            devs.len(),
            if devs.len() == 1 { "" } else { "s" }
        );
        for d in &devs {
            println!("\t{}", d.name());
        }
        if !args.flag("model") {
            print_pci(true);
        }
        return Ok(());
    }
    let only = args.num("device", u64::MAX)?;
    for d in devs
        .iter()
        .filter(|d| only == u64::MAX || u64::from(d.index()) == only)
    {
        let ctx = d.open().map_err(|e| format!("{}: {}", d.name(), e))?;
        print(&ctx, args.flag("verbose"))?;
    }
    if only == u64::MAX && !args.flag("model") {
        print_pci(false);
    }
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("rmlx5-devinfo: {}", e);
        std::process::exit(1);
    }
}

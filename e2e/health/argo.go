package main

// Argo CD's way of running a resource health script, reproduced from its
// util/lua (VM.runLua, ExecuteHealthLua) and gitops-engine's
// GetResourceHealth, without linking Argo CD (whose module pins its own
// Kubernetes libraries):
//   - an object being deleted is Progressing "Pending deletion" before any
//     script runs;
//   - gopher-lua with SkipOpenLibs, then only package, base, table and a
//     safe os (time, date) opened: no string, math or io library;
//   - the object is the global `obj`, converted value by value (JSON
//     numbers become Lua numbers, arrays 1-based tables, null nil);
//   - a 1 s deadline;
//   - the returned table's status must be one of Argo CD's health codes,
//     else the health is Unknown.

import (
	"context"
	"time"

	lua "github.com/yuin/gopher-lua"
)

var healthCodes = map[string]bool{
	"Healthy": true, "Progressing": true, "Degraded": true, "Suspended": true,
	"Missing": true, "Unknown": true,
}

func decodeValue(l *lua.LState, value interface{}) lua.LValue {
	switch v := value.(type) {
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case []interface{}:
		arr := l.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(decodeValue(l, item))
		}
		return arr
	case map[string]interface{}:
		tbl := l.CreateTable(0, len(v))
		for key, item := range v {
			tbl.RawSetH(lua.LString(key), decodeValue(l, item))
		}
		return tbl
	}
	return lua.LNil
}

func openSafeOs(l *lua.LState) int {
	mod := l.RegisterModule(lua.OsLibName, map[string]lua.LGFunction{
		"time": func(l *lua.LState) int { l.Push(lua.LNumber(time.Now().Unix())); return 1 },
		"date": func(l *lua.LState) int {
			l.Push(lua.LString(time.Now().UTC().Format(time.RFC3339)))
			return 1
		},
	})
	l.Push(mod)
	return 1
}

func argoHealth(obj map[string]interface{}, script string) answer {
	if md, ok := obj["metadata"].(map[string]interface{}); ok && md["deletionTimestamp"] != nil {
		return answer{"Progressing", "Pending deletion"}
	}
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.OsLibName, openSafeOs},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.fn), NRet: 0, Protect: true},
			lua.LString(lib.name)); err != nil {
			return answer{"Error", err.Error()}
		}
	}
	l.PreloadModule(lua.OsLibName, openSafeOs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", decodeValue(l, obj))
	if err := l.DoString(script); err != nil {
		return answer{"Error", err.Error()}
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return answer{"Error", "the script returned " + l.Get(-1).Type().String() + ", not a table"}
	}
	st := lua.LVAsString(ret.RawGetString("status"))
	msg := lua.LVAsString(ret.RawGetString("message"))
	if !healthCodes[st] {
		return answer{"Unknown", "The health status is invalid: " + st}
	}
	return answer{st, msg}
}
